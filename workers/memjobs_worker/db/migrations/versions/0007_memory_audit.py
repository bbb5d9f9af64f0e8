"""The memory audit moves into the state database (issue 22): one trail for
every host, instead of ``memory-audit.jsonl`` in each host's data directory
(lost with a container's disk). Never the memory text."""

import sqlalchemy as sa
from alembic import op

revision = "0007_memory_audit"
down_revision = "0006_owner_keyed_ledger"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_audit",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("owner_key", sa.Text, nullable=False),
        sa.Column("doc", sa.Text, nullable=False),
        sa.Column("op", sa.Text, nullable=False),
        sa.Column("applied", sa.Boolean, nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("version", sa.Integer),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("session", sa.Text),
        sa.Column("turn", sa.Text),
        sa.Column("trace", sa.Text),
        sa.Column("host", sa.Text),
        sa.Column("pid", sa.Integer),
    )
    op.create_index("memory_audit_at", "memory_audit", ["at"])
    op.create_index("memory_audit_owner", "memory_audit", ["owner_key", "id"])


def downgrade() -> None:
    op.drop_table("memory_audit")
