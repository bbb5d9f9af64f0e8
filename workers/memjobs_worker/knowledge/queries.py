"""The SQL statements of knowledge search, built safely from user input.

What: :func:`keyword_select` and :func:`vector_select` build the two ranking
queries of :class:`~memjobs_worker.knowledge.store.KnowledgeStore`
(:func:`term_counts_select` first counts how many chunks hold each query
token, for its weight); the helpers validate and bound what a caller passes.

Why a module of its own: this is where user text meets SQL. Every value is a
bound parameter; the full-text query is an OR (``||``) of one
``plainto_tsquery`` per token, so characters such as ``& | ! ( : *`` are never
read as tsquery syntax; a query with no usable token becomes a bounded
``ILIKE`` with ``%``, ``_`` and ``\\`` escaped, over one owner's rows only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from functools import reduce
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY

from memjobs_client.errors import InvalidPayload
from memjobs_worker.db.rows import record_of
from memjobs_worker.fulltext import is_searchable, is_unspaced_token, query_tokens
from memjobs_worker.knowledge.records import ChunkHit
from memjobs_worker.knowledge.schema import Vector, knowledge_chunks, knowledge_documents
from memjobs_worker.ranking import idf as idf  # re-exported: the store weighs tokens with it

#: Longer queries are cut to this many characters before searching.
MAX_QUERY_CHARS = 1000
#: At most this many query tokens are looked up.
MAX_QUERY_TOKENS = 64
#: pgvector's largest dimension.
MAX_DIMS = 16000

SIMPLE: sa.ColumnElement[Any] = sa.literal_column("'simple'::regconfig")
#: Words (Latin, Cyrillic, digits...) are stemmed and stop words dropped.
ENGLISH: sa.ColumnElement[Any] = sa.literal_column("'english'::regconfig")
#: ``ts_rank_cd`` normalisation: divide by 1 + log(chunk length), so a long
#: chunk does not win by its length alone.
RANK_NORMALIZATION = 1
#: The weight of ``ts_rank_cd`` (squashed below 1) beside the summed token
#: weights: it only orders chunks that match equally rare tokens.
TIE_BREAK = 0.1
_chunks, _docs = knowledge_chunks, knowledge_documents
_HIT_COLUMNS = (_chunks.c.doc_id, _chunks.c.chunk_index, _chunks.c.text, _docs.c.title, _docs.c.source_label)
_JOIN = _chunks.join(_docs, sa.and_(_docs.c.owner_key == _chunks.c.owner_key, _docs.c.doc_id == _chunks.c.doc_id))


def keyword_select(
    owner_key: str,
    query: str,
    limit: int,
    weigh: Callable[[list[str]], tuple[list[float], float]] | None = None,
) -> sa.Select[Any] | None:
    """The keyword ranking of ``query`` among the owner's chunks; None for a blank
    query or when no token occurs in the owner's chunks.

    ``weigh(tokens)`` gives each token its weight (see :func:`term_counts_select`
    and :func:`idf`) and the least summed weight a chunk must hold to be kept
    (0 keeps any chunk holding a token; see
    :data:`memjobs_worker.ranking.MIN_SHOULD_MATCH`); a chunk ranks by the summed
    weights of the distinct query tokens it contains, then by ``ts_rank_cd``. So
    a chunk with the rare words of a query beats one that repeats a common word
    many times, and a long document full of "the" and "to" weighs nothing (stop
    words are not even indexed). Without ``weigh`` every token weighs 1.
    """
    check_limit(limit)
    text = clean_query(query)
    if not text:
        return None
    tokens = search_tokens(text)
    c = _chunks.c
    if not tokens:
        pattern = "%" + _escape_like(text) + "%"
        return (
            sa.select(*_HIT_COLUMNS, sa.literal(0.0, sa.Float).label("rank"))
            .select_from(_JOIN)
            .where(c.owner_key == owner_key, c.text.ilike(pattern, escape="\\"))
            .order_by(c.doc_id, c.chunk_index)
            .limit(limit)
        )
    weights, least = weigh(tokens) if weigh is not None else ([1.0] * len(tokens), 0.0)
    kept = [(t, w) for t, w in zip(tokens, weights, strict=True) if w > 0]
    if not kept:
        return None
    per_token = [token_query(t) for t, _ in kept]
    tsquery = reduce(lambda a, b: a.op("||")(b), per_token)  # OR of the tokens
    density = sa.func.ts_rank_cd(c.tsv, tsquery, RANK_NORMALIZATION, type_=sa.Float)
    matched: list[sa.ColumnElement[Any]] = [
        sa.case((c.tsv.bool_op("@@")(q), w), else_=0.0) for q, (_, w) in zip(per_token, kept, strict=True)
    ]
    held = reduce(lambda a, b: a + b, matched)
    score = held + TIE_BREAK * density / (1.0 + density)
    rank = sa.type_coerce(score, sa.Float).label("rank")
    kept_chunks = [c.owner_key == owner_key, c.tsv.bool_op("@@")(tsquery)]
    if least > 0:
        kept_chunks.append(sa.type_coerce(held, sa.Float) >= least)
    return (
        sa.select(*_HIT_COLUMNS, rank)
        .select_from(_JOIN)
        .where(*kept_chunks)
        .order_by(rank.desc(), c.doc_id, c.chunk_index)
        .limit(limit)
    )


def search_tokens(text: str) -> list[str]:
    """The tokens of a (cleaned) query worth a full-text lookup, at most :data:`MAX_QUERY_TOKENS`."""
    return [t for t in query_tokens(text) if is_searchable(t)][:MAX_QUERY_TOKENS]


def token_query(token: str) -> sa.ColumnElement[Any]:
    """The ``tsquery`` of one token: ``english`` for a word, ``simple`` for CJK."""
    return sa.func.plainto_tsquery(SIMPLE if is_unspaced_token(token) else ENGLISH, sa.literal(token, sa.Text))


def term_counts_select(owner_key: str, tokens: Sequence[str]) -> sa.Select[Any]:
    """One row: the owner's chunk count, how many chunks contain each token, then
    for each token whether the text search looks it up at all (a stop word: no)."""
    c = _chunks.c
    counts = [sa.func.count().filter(c.tsv.bool_op("@@")(token_query(t))) for t in tokens]
    looked_up = [sa.func.numnode(token_query(t)) > 0 for t in tokens]
    columns: list[sa.ColumnElement[Any]] = [sa.func.count(), *counts, *looked_up]
    return sa.select(*columns).where(c.owner_key == owner_key)


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
    inner = (
        sa.select(*_HIT_COLUMNS, distance.label("distance"))
        .select_from(_JOIN)
        .where(c.owner_key == owner_key, c.dims == len(values), c.embedding.is_not(None))
        .subquery()
    )
    return (
        sa.select(
            inner.c.doc_id,
            inner.c.chunk_index,
            inner.c.text,
            inner.c.title,
            inner.c.source_label,
            (1.0 - inner.c.distance).label("rank"),
        )
        .where(inner.c.distance.is_not(None), inner.c.distance != sa.literal_column("'NaN'::float8"))
        .order_by(inner.c.distance, inner.c.doc_id, inner.c.chunk_index)
        .limit(limit)
    )


def tsvector_of(words: str, unspaced: str) -> sa.ColumnElement[Any]:
    """The ``tsvector`` of a chunk from its bound token parameters (see
    :func:`~memjobs_worker.fulltext.split_tokens`): words through
    ``english``, characters and bigrams through ``simple``."""
    return sa.func.to_tsvector(ENGLISH, sa.bindparam(words, type_=sa.Text)).op("||")(
        sa.func.to_tsvector(SIMPLE, sa.bindparam(unspaced, type_=sa.Text))
    )


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
    return record_of(ChunkHit, row, rank=float(row.rank))


def clean_query(query: str) -> str:
    """The query as something safe to bind: bounded, no NUL, no lone surrogates."""
    text = query[:MAX_QUERY_CHARS].replace("\x00", " ")
    return text.encode("utf-8", "replace").decode("utf-8").strip()


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
