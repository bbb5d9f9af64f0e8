"""Chunk vectors survive a reindex attempt that fails or is killed (issue 24).

``knowledge_embedding_cache`` holds the vectors a reindex computed, written
batch by batch while it embeds, keyed by owner, embedder (model id and vector
size) and the sha256 of the chunk text. A retry reads them back and embeds
only the rest; a successful reindex deletes them (its chunks now hold the
vectors). On the ``knowledge`` branch, after ``0003_knowledge``: a database
with knowledge off has no such table. A database whose knowledge tables were
made by ``create_all`` (adopted by 0003) may have it already.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_knowledge_embedding_cache"
down_revision = "0003_knowledge"
branch_labels = None
depends_on = None


class _Vector(sa.types.UserDefinedType[list[float]]):
    """pgvector's ``vector`` of any dimension (each row records its ``dims``)."""

    cache_ok = True

    def get_col_spec(self, **kw: object) -> str:
        return "vector"


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("knowledge_embedding_cache"):
        return
    op.create_table(
        "knowledge_embedding_cache",
        sa.Column("owner_key", sa.Text, primary_key=True),
        sa.Column("model", sa.Text, primary_key=True),
        sa.Column("dims", sa.Integer, primary_key=True),
        sa.Column("chunk_hash", sa.Text, primary_key=True),
        sa.Column("embedding", _Vector(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("knowledge_embedding_cache")
