"""The knowledge corpus: documents, chunks (full text and vectors), index facts.

The first migration of the ``knowledge`` branch: a base of its own, applied
only when knowledge is on, so a database whose knowledge is off has none of
these tables.

A database that ran memjobs before knowledge had migrations already has these
tables (then created by ``create_all`` with the same definitions): each table
is created only if absent, and the database simply joins the branch.
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import TSVECTOR

revision = "0003_knowledge"
down_revision = None
branch_labels = ("knowledge",)
depends_on = None


class _Vector(sa.types.UserDefinedType[list[float]]):
    """pgvector's ``vector`` of any dimension (each chunk records its ``dims``)."""

    cache_ok = True

    def get_col_spec(self, **kw: object) -> str:
        return "vector"


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    if "knowledge_documents" not in existing:
        op.create_table(
            "knowledge_documents",
            sa.Column("owner_key", sa.Text, primary_key=True),
            sa.Column("doc_id", sa.Text, primary_key=True),
            sa.Column("title", sa.Text, nullable=False),
            sa.Column("source_label", sa.Text, nullable=False),
            sa.Column("content_hash", sa.Text),
            sa.Column("state", sa.Text, nullable=False),
            sa.Column("reason", sa.Text),
            sa.Column("chars", sa.Integer, nullable=False),
            sa.Column("chunks", sa.Integer, nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            sa.CheckConstraint("state IN ('indexed', 'refused')", name="knowledge_documents_state"),
        )
    if "knowledge_chunks" not in existing:
        op.create_table(
            "knowledge_chunks",
            sa.Column("owner_key", sa.Text, primary_key=True),
            sa.Column("doc_id", sa.Text, primary_key=True),
            sa.Column("chunk_index", sa.Integer, primary_key=True),
            sa.Column("chunk_hash", sa.Text, nullable=False),
            # The source of truth; tokens and tsv derive from it and can be rebuilt.
            sa.Column("text", sa.Text, nullable=False),
            sa.Column("tokens", sa.Text),
            sa.Column("tsv", TSVECTOR),
            sa.Column("embedding", _Vector()),
            sa.Column("dims", sa.Integer),
            sa.ForeignKeyConstraint(
                ["owner_key", "doc_id"],
                ["knowledge_documents.owner_key", "knowledge_documents.doc_id"],
                ondelete="CASCADE",
                name="knowledge_chunks_document",
            ),
        )
        op.create_index("knowledge_chunks_tsv", "knowledge_chunks", ["tsv"], postgresql_using="gin")
        op.create_index("knowledge_chunks_hash", "knowledge_chunks", ["owner_key", "chunk_hash"])
    if "knowledge_meta" not in existing:
        op.create_table(
            "knowledge_meta",
            sa.Column("key", sa.Text, primary_key=True),
            sa.Column("value", sa.Text, nullable=False),
        )


def downgrade() -> None:
    for table in ("knowledge_meta", "knowledge_chunks", "knowledge_documents"):
        op.drop_table(table)
