"""The SQL statements of knowledge search, built safely from user input.

What: :func:`keyword_select` and :func:`vector_select` build the two ranking
queries of :class:`~memjobs_worker.knowledge.store.KnowledgeStore`; the helpers
validate and bound what a caller passes.

Why a module of its own: this is where user text meets SQL. Every value is a
bound parameter; the full-text query is an OR (``||``) of one
``plainto_tsquery`` per token, so characters such as ``& | ! ( : *`` are never
read as tsquery syntax; a query with no usable token becomes a bounded
``ILIKE`` with ``%``, ``_`` and ``\\`` escaped, over one owner's rows only.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from functools import reduce
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY

from memjobs_client.errors import InvalidPayload
from memjobs_worker.knowledge.records import ChunkHit
from memjobs_worker.knowledge.schema import Vector, knowledge_chunks, knowledge_documents
from memjobs_worker.knowledge.tokens import is_searchable, query_tokens

#: Longer queries are cut to this many characters before searching.
MAX_QUERY_CHARS = 1000
#: At most this many query tokens are looked up.
MAX_QUERY_TOKENS = 64
#: pgvector's largest dimension.
MAX_DIMS = 16000

SIMPLE: sa.ColumnElement[Any] = sa.literal_column("'simple'::regconfig")
_chunks, _docs = knowledge_chunks, knowledge_documents
_HIT_COLUMNS = (_chunks.c.doc_id, _chunks.c.chunk_index, _chunks.c.text,
                _docs.c.title, _docs.c.source_label)
_JOIN = _chunks.join(
    _docs, sa.and_(_docs.c.owner_key == _chunks.c.owner_key, _docs.c.doc_id == _chunks.c.doc_id)
)


def keyword_select(owner_key: str, query: str, limit: int) -> sa.Select[Any] | None:
    """The keyword ranking of ``query`` among the owner's chunks; None for a blank query."""
    check_limit(limit)
    text = _clean_query(query)
    if not text:
        return None
    tokens = [t for t in query_tokens(text) if is_searchable(t)][:MAX_QUERY_TOKENS]
    c = _chunks.c
    if not tokens:
        pattern = "%" + _escape_like(text) + "%"
        return (sa.select(*_HIT_COLUMNS, sa.literal(0.0, sa.Float).label("rank"))
                .select_from(_JOIN)
                .where(c.owner_key == owner_key, c.text.ilike(pattern, escape="\\"))
                .order_by(c.doc_id, c.chunk_index)
                .limit(limit))
    per_token: list[sa.ColumnElement[Any]] = [
        sa.func.plainto_tsquery(SIMPLE, sa.literal(t, sa.Text)) for t in tokens
    ]
    tsquery = reduce(lambda a, b: a.op("||")(b), per_token)  # OR of the tokens
    rank = sa.func.ts_rank_cd(c.tsv, tsquery, type_=sa.Float).label("rank")
    return (sa.select(*_HIT_COLUMNS, rank).select_from(_JOIN)
            .where(c.owner_key == owner_key, c.tsv.bool_op("@@")(tsquery))
            .order_by(rank.desc(), c.doc_id, c.chunk_index)
            .limit(limit))


def vector_select(owner_key: str, vector: Sequence[float], limit: int) -> sa.Select[Any] | None:
    """The cosine ranking around ``vector``; None when no chunk can match (empty or zero).

    Raises:
        InvalidPayload: a value is NaN or infinite.
    """
    check_limit(limit)
    values = [float(v) for v in vector]
    if not all(math.isfinite(v) for v in values):
        raise InvalidPayload("a query vector must be finite")
    if not values or len(values) > MAX_DIMS or not any(values):
        return None
    c = _chunks.c
    probe = sa.cast(sa.literal(values, Vector()), Vector())
    # CASE keeps <=> away from rows of another dimension, which it would refuse.
    distance = sa.case((c.dims == len(values), c.embedding.op("<=>", return_type=sa.Float)(probe)))
    inner = (sa.select(*_HIT_COLUMNS, distance.label("distance")).select_from(_JOIN)
             .where(c.owner_key == owner_key, c.dims == len(values), c.embedding.is_not(None))
             .subquery())
    return (sa.select(inner.c.doc_id, inner.c.chunk_index, inner.c.text, inner.c.title,
                      inner.c.source_label, (1.0 - inner.c.distance).label("rank"))
            .where(inner.c.distance.is_not(None),
                   inner.c.distance != sa.literal_column("'NaN'::float8"))
            .order_by(inner.c.distance, inner.c.doc_id, inner.c.chunk_index)
            .limit(limit))


def check_limit(limit: int) -> None:
    if limit < 1:
        raise InvalidPayload(f"limit must be at least 1, got {limit}")


def check_text(*values: str) -> None:
    """Refuse text PostgreSQL cannot store (NUL) or UTF-8 cannot encode (lone surrogates)."""
    for value in values:
        if "\x00" in value:
            raise InvalidPayload("text must not contain NUL characters")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidPayload("text must be valid Unicode") from exc


def text_array(values: Collection[str]) -> sa.ColumnElement[Any]:
    """One bound ``text[]`` parameter, however many values (and fine when empty)."""
    return sa.cast(sa.literal(sorted(set(values)), ARRAY(sa.Text)), ARRAY(sa.Text))


def to_hit(row: Any) -> ChunkHit:
    return ChunkHit(doc_id=row.doc_id, chunk_index=row.chunk_index, text=row.text,
                    title=row.title, source_label=row.source_label, rank=float(row.rank))


def _clean_query(query: str) -> str:
    """The query as something safe to bind: bounded, no NUL, no lone surrogates."""
    text = query[:MAX_QUERY_CHARS].replace("\x00", " ")
    return text.encode("utf-8", "replace").decode("utf-8").strip()


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
