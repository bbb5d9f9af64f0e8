"""Sources get a ``failed`` state and the reason of the failure (issue 10: a
model whose extraction replies are malformed ends the batch with its reason
recorded, instead of the sources passing for learned with nothing learned)."""

import sqlalchemy as sa
from alembic import op

revision = "0005_failed_sources"
down_revision = "0004_session_run_leases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sources", sa.Column("reason", sa.Text))
    op.drop_constraint("sources_state", "sources", type_="check")
    op.create_check_constraint("sources_state", "sources", "state IN ('pending', 'learned', 'forgotten', 'failed')")


def downgrade() -> None:
    # An older memjobs knows no failed source: it tries them again.
    op.execute("UPDATE sources SET state = 'pending' WHERE state = 'failed'")
    op.drop_constraint("sources_state", "sources", type_="check")
    op.create_check_constraint("sources_state", "sources", "state IN ('pending', 'learned', 'forgotten')")
    op.drop_column("sources", "reason")
