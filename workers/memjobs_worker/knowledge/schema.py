"""The knowledge tables, and :func:`ensure_schema` that has them created.

What: documents, their chunks (raw text, search tokens, ``tsvector`` and an
optional pgvector embedding) and a one-row-per-key meta table recording which
tokenizer version produced the stored tokens. They are defined on the one
metadata of the state database (:mod:`memjobs_worker.db.metadata`) and created
by migration ``0003_knowledge``.

Why a branch of their own: knowledge is optional, and a switched-off feature
must leave nothing behind in the database. The knowledge migrations form the
Alembic branch ``knowledge``, applied by :func:`ensure_schema` (through
:func:`~memjobs_worker.db.migrate.migrate`, under its advisory lock, so several
workers may start at once) only by whoever enables knowledge. The embedding
column has no fixed dimension: the embedding model (and so its dimension) is
configuration, and each chunk records its own ``dims``.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import TSVECTOR
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Engine
from sqlalchemy.sql.schema import SchemaItem

from memjobs_worker.db.connect import transaction
from memjobs_worker.db.metadata import KNOWLEDGE, key, keys, required, table, timestamp
from memjobs_worker.db.migrate import migrate
from memjobs_worker.db.pgvector import Vector, vector_literal
from memjobs_worker.fulltext import TOKENIZER_VERSION

#: The ``knowledge_meta`` key of the tokenizer version of the stored tokens.
TOKENIZER_KEY = "tokenizer_version"

__all__ = [
    "TOKENIZER_KEY",
    "Vector",
    "ensure_schema",
    "knowledge_chunks",
    "knowledge_documents",
    "knowledge_embedding_cache",
    "knowledge_meta",
    "vector_literal",
]


def _table(name: str, *items: SchemaItem) -> sa.Table:
    """A table of the knowledge branch, as every table here is."""
    return table(name, *items, branch=KNOWLEDGE)


#: One row per document an owner submitted: indexed, or refused with a reason.
knowledge_documents = _table(
    "knowledge_documents",
    *keys("owner_key", "doc_id"),
    required("title"),
    required("source_label"),
    sa.Column("content_hash", sa.Text),
    required("state"),
    sa.Column("reason", sa.Text),
    required("chars", sa.Integer),
    required("chunks", sa.Integer),
    timestamp("updated_at", nullable=False),
    sa.CheckConstraint("state IN ('indexed', 'refused')", name="knowledge_documents_state"),
)

#: The chunks of indexed documents: raw text (the source of truth), the tokens
#: and tsvector derived from it, and the embedding when one was computed.
knowledge_chunks = _table(
    "knowledge_chunks",
    *keys("owner_key", "doc_id"),
    key("chunk_index", sa.Integer),
    required("chunk_hash"),
    required("text"),
    sa.Column("tokens", sa.Text),
    sa.Column("tsv", TSVECTOR),
    sa.Column("embedding", Vector()),
    sa.Column("dims", sa.Integer),
    sa.ForeignKeyConstraint(
        ["owner_key", "doc_id"],
        ["knowledge_documents.owner_key", "knowledge_documents.doc_id"],
        ondelete="CASCADE",
        name="knowledge_chunks_document",
    ),
)
sa.Index("knowledge_chunks_tsv", knowledge_chunks.c.tsv, postgresql_using="gin")
sa.Index("knowledge_chunks_hash", knowledge_chunks.c.owner_key, knowledge_chunks.c.chunk_hash)

#: Small facts about the stored index, such as the tokenizer version.
knowledge_meta = _table(
    "knowledge_meta",
    key("key"),
    required("value"),
)

#: Vectors a reindex attempt computed, kept until its corpus is written, so a
#: retry after a failed or killed attempt embeds only the rest
#: (:mod:`memjobs_worker.knowledge.cache`). On the knowledge branch (migration
#: ``0009_knowledge_embedding_cache``).
knowledge_embedding_cache = _table(
    "knowledge_embedding_cache",
    *keys("owner_key", "model"),
    key("dims", sa.Integer),
    key("chunk_hash"),
    required("embedding", Vector()),
    timestamp("created_at", nullable=False),
)


def ensure_schema(engine: Engine) -> None:
    """Bring the schema, knowledge tables included, to head; record a fresh index's tokenizer.

    Idempotent and safe to call from several processes at once: the migrations
    run under the migrations' advisory lock, so the second caller waits and
    then finds everything in place. A new (empty) index records the current
    tokenizer version; an existing one keeps the version its tokens were
    made with, for :meth:`~memjobs_worker.knowledge.store.KnowledgeStore.index_is_stale`.

    Raises:
        ConfigurationError: the server has no pgvector extension.
        BackendUnavailable: the database did not answer.
    """
    migrate(engine, knowledge=True)
    with transaction(engine) as conn:
        conn.execute(
            pg_insert(knowledge_meta)
            .values(key=TOKENIZER_KEY, value=str(TOKENIZER_VERSION))
            .on_conflict_do_nothing(index_elements=["key"])
        )
