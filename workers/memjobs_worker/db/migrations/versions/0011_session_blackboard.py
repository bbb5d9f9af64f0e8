"""The L0 blackboard follows a session across hosts (issue 34, item 3): the seeds
kept each session's blackboard in a SQLite file on the gateway's host, so a
session resumed on another host found nothing. One row per entry, idempotent by
(owner, session, entry id), read in event order."""

import sqlalchemy as sa
from alembic import op

revision = "0011_session_blackboard"
down_revision = "0010_session_run_endings"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "blackboard_entries",
        sa.Column("owner_key", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, primary_key=True),
        sa.Column("entry_id", sa.Text, primary_key=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("trust", sa.Text, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("kind", sa.Text),
        sa.Column("result", sa.Text, nullable=False),
        sa.Column("evidence", sa.JSON, nullable=False),
        sa.Column("size_bytes", sa.Integer, nullable=False),
        sa.Column("stored_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("blackboard_entries_order", "blackboard_entries", ["owner_key", "session_id", "seq", "entry_id"])
    op.create_index("blackboard_entries_at", "blackboard_entries", ["at"])


def downgrade() -> None:
    op.drop_table("blackboard_entries")
