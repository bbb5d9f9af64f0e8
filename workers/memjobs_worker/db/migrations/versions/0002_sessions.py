"""Session-end state: Markdown memory documents (SQL provider), session runs,
digests and the task ledger."""

import sqlalchemy as sa
from alembic import op

revision = "0002_sessions"
down_revision = "0001_ledger"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_documents",
        sa.Column("owner_key", sa.Text, primary_key=True),
        sa.Column("doc", sa.Text, primary_key=True),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("doc IN ('USER.md', 'MEMORY.md')", name="memory_documents_doc"),
    )
    # One row per (owner, session, kind) of session-end work: its idempotency.
    op.create_table(
        "session_runs",
        sa.Column("owner_key", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, primary_key=True),
        sa.Column("kind", sa.Text, primary_key=True),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint("kind IN ('consolidate', 'digest')", name="session_runs_kind"),
        sa.CheckConstraint("state IN ('running', 'done')", name="session_runs_state"),
    )
    op.create_table(
        "session_digests",
        sa.Column("owner_key", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, primary_key=True),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("gist", sa.Text, nullable=False),
        # The goals of the tasks dispatched in the session, frozen; never their status.
        sa.Column("task_goals", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("session_digests_owner_time", "session_digests", ["owner_key", "created_at"])
    op.create_table(
        "tasks",
        sa.Column("owner_key", sa.Text, primary_key=True),
        sa.Column("task_id", sa.Text, primary_key=True),
        sa.Column("goal", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        # Set when the status became terminal; retention deletes 3 days after.
        sa.Column("terminal_at", sa.DateTime(timezone=True)),
    )
    op.create_index("tasks_terminal", "tasks", ["terminal_at"])


def downgrade() -> None:
    for table in ("tasks", "session_digests", "session_runs", "memory_documents"):
        op.drop_table(table)
