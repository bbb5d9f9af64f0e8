"""The knowledge tables, created on demand by :func:`ensure_schema`.

What: documents, their chunks (raw text, search tokens, ``tsvector`` and an
optional pgvector embedding) and a one-row-per-key meta table recording which
tokenizer version produced the stored tokens.

Why not an Alembic migration: knowledge is optional, and a switched-off feature
must leave nothing behind in the database. The tables are created only when the
knowledge feature is enabled, by whoever enables it, with ``CREATE ... IF NOT
EXISTS`` semantics under an advisory lock so several workers may start at once.
The embedding column has no fixed dimension: the embedding model (and so its
dimension) is configuration, and each chunk records its own ``dims``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import TSVECTOR
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Dialect, Engine

from memjobs_client.errors import ConfigurationError
from memjobs_worker.db.connect import transaction
from memjobs_worker.knowledge.tokens import TOKENIZER_VERSION

#: The advisory lock key serialising :func:`ensure_schema` ("memjobsK").
_ADVISORY_KEY = 0x6D656D6A6F62734B
#: The ``knowledge_meta`` key of the tokenizer version of the stored tokens.
TOKENIZER_KEY = "tokenizer_version"


class Vector(sa.types.UserDefinedType[list[float]]):
    """pgvector's ``vector`` of any dimension, as a Python list of floats.

    Values travel as pgvector's text literal (``[1,2,3]``), so no pgvector
    Python package is needed.
    """

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "vector"

    def bind_processor(self, dialect: Dialect) -> Callable[[list[float] | None], str | None]:
        def process(value: list[float] | None) -> str | None:
            return None if value is None else vector_literal(value)

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], list[float] | None]:
        def process(value: Any) -> list[float] | None:
            if value is None:
                return None
            if isinstance(value, str):
                inner = value.strip()[1:-1]
                return [float(x) for x in inner.split(",")] if inner else []
            return [float(x) for x in value]

        return process


def vector_literal(values: Sequence[float]) -> str:
    """pgvector's text form of ``values``.

    Raises:
        ValueError: a value is NaN or infinite (pgvector refuses them).
    """
    floats = [float(v) for v in values]
    if not all(math.isfinite(v) for v in floats):
        raise ValueError("vector values must be finite")
    return "[" + ",".join(repr(v) for v in floats) + "]"


metadata = sa.MetaData()

#: One row per document an owner submitted: indexed, or refused with a reason.
knowledge_documents = sa.Table(
    "knowledge_documents",
    metadata,
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

#: The chunks of indexed documents: raw text (the source of truth), the tokens
#: and tsvector derived from it, and the embedding when one was computed.
knowledge_chunks = sa.Table(
    "knowledge_chunks",
    metadata,
    sa.Column("owner_key", sa.Text, primary_key=True),
    sa.Column("doc_id", sa.Text, primary_key=True),
    sa.Column("chunk_index", sa.Integer, primary_key=True),
    sa.Column("chunk_hash", sa.Text, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
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
knowledge_meta = sa.Table(
    "knowledge_meta",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)


def ensure_schema(engine: Engine) -> None:
    """Create the pgvector extension and the knowledge tables where missing.

    Idempotent and safe to call from several processes at once: the work runs
    in one transaction holding a transaction-scoped advisory lock, so the
    second caller waits and then finds everything in place. A fresh index
    records the current tokenizer version.

    Raises:
        ConfigurationError: the server has no pgvector extension.
        BackendUnavailable: the database did not answer.
    """
    with transaction(engine) as conn:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _ADVISORY_KEY})
        available = conn.execute(
            sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        ).first()
        if available is None:
            raise ConfigurationError(
                "the knowledge corpus needs the pgvector extension, which this "
                "PostgreSQL server does not have: install pgvector on it, or switch "
                "knowledge off"
            )
        conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector"))
        metadata.create_all(conn, checkfirst=True)
        conn.execute(
            pg_insert(knowledge_meta)
            .values(key=TOKENIZER_KEY, value=str(TOKENIZER_VERSION))
            .on_conflict_do_nothing(index_elements=["key"])
        )
