"""The personal-memory ledger: sources, provenance, fencing, attempts, tombstones.

The first migration of the ``core`` branch, applied at every start-up.
"""

import sqlalchemy as sa
from alembic import op

revision = "0001_ledger"
down_revision = None
branch_labels = ("core",)
depends_on = None


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.create_table(
        "sources",
        sa.Column("source_id", sa.Text, primary_key=True),
        sa.Column("owner_key", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("session_id", sa.Text),
        # Cleared when the source is forgotten.
        sa.Column("text", sa.Text),
        sa.Column("message_id", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("learned_at", sa.DateTime(timezone=True)),
        sa.Column("forgotten_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint("state IN ('pending', 'learned', 'forgotten')", name="sources_state"),
    )
    op.create_index("sources_owner_state", "sources", ["owner_key", "state", "updated_at"])
    op.create_table(
        "provenance",
        sa.Column("memory_id", sa.Text, primary_key=True),
        sa.Column("source_id", sa.Text, sa.ForeignKey("sources.source_id"), primary_key=True),
        sa.Column("owner_key", sa.Text, nullable=False),
    )
    op.create_index("provenance_source", "provenance", ["source_id"])
    op.create_index("provenance_owner", "provenance", ["owner_key"])
    op.create_table(
        "fencing",
        sa.Column("owner_key", sa.Text, primary_key=True),
        sa.Column("token", sa.BigInteger, nullable=False),
    )
    # One row per extraction attempt; the sequence numbers order starts and ends
    # across processes, which is how tests prove no two attempts overlapped.
    op.execute("CREATE SEQUENCE attempt_events")
    op.create_table(
        "attempts",
        sa.Column("attempt_id", sa.Text, primary_key=True),
        sa.Column("owner_key", sa.Text, nullable=False),
        sa.Column("token", sa.BigInteger, nullable=False),
        sa.Column("source_ids", sa.JSON, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("started_seq", sa.BigInteger, nullable=False),
        sa.Column("ended_seq", sa.BigInteger),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("state IN ('open', 'committed', 'aborted', 'abandoned')", name="attempts_state"),
    )
    op.create_index("attempts_owner_state", "attempts", ["owner_key", "state"])
    # Memories whose deletion from the vector store is owed (survives a crash).
    op.create_table(
        "tombstones",
        sa.Column("memory_id", sa.Text, primary_key=True),
        sa.Column("owner_key", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("tombstones_owner", "tombstones", ["owner_key"])


def downgrade() -> None:
    for table in ("tombstones", "attempts", "fencing", "provenance", "sources"):
        op.drop_table(table)
    op.execute("DROP SEQUENCE attempt_events")
