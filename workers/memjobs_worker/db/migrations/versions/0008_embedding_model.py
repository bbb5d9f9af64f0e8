"""Stored vectors record the model that made them (issue 24).

``embedding_models`` holds one row per space of stored vectors (``memory``:
mem0's collection; ``knowledge``: the chunks) naming the embedder and the
vector size. It starts empty: a stack's first start with this version records
what it finds (see :mod:`memjobs_worker.embedding.record`); vectors it cannot
attribute to the current embedder are re-embedded by ``memjobs reembed``.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_embedding_model"
down_revision = "0007_memory_audit"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "embedding_models",
        sa.Column("space", sa.Text, primary_key=True),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("dims", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("embedding_models")
