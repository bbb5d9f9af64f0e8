"""Session runs claimed with a lease: holder token, lease end, attempts, the
reason of a failure, and a ``failed`` state (issue 11: exactly one run per
session whatever the delivery; a malformed model answer ends the run with
its reason)."""

import sqlalchemy as sa
from alembic import op

revision = "0004_session_run_leases"
down_revision = "0002_sessions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("session_runs", sa.Column("holder", sa.Text))
    op.add_column("session_runs", sa.Column("lease_until", sa.DateTime(timezone=True)))
    op.add_column("session_runs", sa.Column("attempts", sa.Integer, nullable=False, server_default="0"))
    op.add_column("session_runs", sa.Column("reason", sa.Text))
    op.add_column("session_runs", sa.Column("updated_at", sa.DateTime(timezone=True)))
    op.drop_constraint("session_runs_state", "session_runs", type_="check")
    op.create_check_constraint("session_runs_state", "session_runs", "state IN ('running', 'done', 'failed')")


def downgrade() -> None:
    op.execute("UPDATE session_runs SET state = 'done' WHERE state = 'failed'")
    op.drop_constraint("session_runs_state", "session_runs", type_="check")
    op.create_check_constraint("session_runs_state", "session_runs", "state IN ('running', 'done')")
    for column in ("updated_at", "reason", "attempts", "lease_until", "holder"):
        op.drop_column("session_runs", column)
