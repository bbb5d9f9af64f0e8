"""Session runs always end: a ``skipped`` state and the dead letter that ended a run
(issue 30, item 3).

A run skipped by a worker with no model (or with consolidation or the digest
switched off) ends ``skipped`` with its reason instead of staying ``running``;
a run whose message was dead-lettered ends ``failed`` and names the letter
(``dead_letter``: Dramatiq's message id, kept across replays), so that replaying
that letter, and nothing else, may run it again.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_session_run_endings"
down_revision = "0008_embedding_model"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("session_runs", sa.Column("dead_letter", sa.Text))
    op.drop_constraint("session_runs_state", "session_runs", type_="check")
    op.create_check_constraint(
        "session_runs_state", "session_runs", "state IN ('running', 'done', 'skipped', 'failed')"
    )


def downgrade() -> None:
    op.execute("UPDATE session_runs SET state = 'failed' WHERE state = 'skipped'")
    op.drop_constraint("session_runs_state", "session_runs", type_="check")
    op.create_check_constraint("session_runs_state", "session_runs", "state IN ('running', 'done', 'failed')")
    op.drop_column("session_runs", "dead_letter")
