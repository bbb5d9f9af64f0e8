"""Recall over mem0's collection: nearness, keywords and the memories beside.

What: :func:`fused_search` reads, for a question, every one of the owner's
memories with its cosine similarity to the question's vector (in the order they
were made) and, from PostgreSQL full text, the weight of the question's words and
Chinese character pairs each memory holds; :func:`rank_memories` scores each
memory from its nearness, its share of the question's keyword weight (a line of a
transcript read with the lines just before it: the turns it answers) and the best of its
neighbours (the memories made just before and after it: the turns of the same
conversation), and, among memories that read as lines of a transcript
("[date] Speaker: text"), puts first those said by the person the question names
and those stamped on the date it names (:mod:`~memjobs_worker.memory.engine.turns`).
A memory's ``score`` is that score, in [0, 1]: a memory that
is the question, word for word, reads 1; unrelated memories stay under a floor
and are not shown.

Why these: the embedding finds what a question means in other words or the
other language ("what am I allergic to?" → 我对花生过敏); the keywords find
what an embedding blurs: names, numbers, exact phrases (docs/embeddings.md
has the figures of each alone and fused); a turn says what it says after the
turns it answers ("yes, last year" after "have you been painting?"), so its
keywords are read with theirs; the neighbours find the turn that answers beside
the turns that say what it is about; the
speaker and the date tell apart turns that are alike in words ("What did
Caroline research?" is answered by Caroline, not by Melanie asking her). The
weights were chosen on LoCoMo's development conversations and checked by
leaving each conversation out (``bench/bench_locomo.py``, docs/benchmarks.md).

How the keywords are stored: mem0 keeps, beside each memory's text, a
"lemmatised" copy it searches with ``to_tsvector('simple', …)``. memjobs
hands mem0 :func:`memjobs_worker.fulltext.index_tokens` as that lemmatiser
(see :func:`patch_mem0_tokens`), so the copy holds knowledge's tokens: words,
and each Chinese character and pair. A question is looked up token by token
(:func:`memjobs_worker.fulltext.query_tokens`), each weighted by its rarity among
the owner's memories (:func:`memjobs_worker.ranking.idf`), words through
PostgreSQL's ``english`` configuration (stemmed, stop words weigh nothing) and
Chinese through ``simple``. The search is exact over the owner's rows (mem0's
collection is indexed by owner: see ``_index_by_owner``).
"""

from __future__ import annotations

import datetime
import functools
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import psycopg
from psycopg import pq, sql
from psycopg.adapt import Dumper
from psycopg_pool import ConnectionPool

from memjobs_worker.fulltext import index_tokens, is_searchable, is_unspaced_token, query_tokens
from memjobs_worker.memory.engine.base import MemoryHit
from memjobs_worker.memory.engine.turns import date_spans, named_speaker, speaker_of, stamp_of
from memjobs_worker.ranking import idf, question_weight

#: What holding every keyword of the question weighs against being its nearest
#: memory (1), in a memory's own score (:func:`rank_memories`).
KEYWORD_WEIGHT = 0.5
#: The share of the best neighbour's own score a memory takes (:func:`rank_memories`).
NEIGHBOUR_WEIGHT = 0.6
#: How many memories made before and after a memory are its neighbours.
NEIGHBOURS = 2
#: A memory takes its neighbour's share only as far as it relates to the question
#: itself: in full from this own score up, in proportion below, none at 0 or less
#: (a fact remembered beside the answer is not the answer).
RELATED = 0.05
#: What a memory that relates to the question gains when it was said by the person the
#: question names (:func:`~memjobs_worker.memory.engine.turns.named_speaker`).
SPEAKER_WEIGHT = 0.15
#: What a memory that relates to the question gains when its stamp falls in a date the
#: question names (:func:`~memjobs_worker.memory.engine.turns.date_spans`).
DATE_WEIGHT = 0.1
#: A memory scoring this or less is not shown (unrelated to the question).
FLOOR = 0.1
#: At most this many question tokens are looked up.
MAX_QUERY_TOKENS = 64

_DAY = datetime.timedelta(days=1)
_LEMMAS = "coalesce(payload->>'text_lemmatized', payload->>'data')"


def patch_mem0_tokens(mem0_main: Any) -> None:
    """Make mem0 store :func:`~memjobs_worker.fulltext.index_tokens` as each memory's
    keyword form (``text_lemmatized``) instead of spaCy lemmas (memjobs installs
    no spaCy, so it stored the raw text, one unsearchable "word" per Chinese sentence)."""
    mem0_main.lemmatize_for_bm25 = index_tokens


def fused_search(
    pool: ConnectionPool[Any],
    table: str,
    owner_key: str,
    query: str,
    vector: Sequence[float],
    limit: int,
    min_score: float,
) -> list[MemoryHit]:
    """The owner's ``limit`` best memories for ``query`` (whose vector is ``vector``), by
    :func:`rank_memories`; each hit's ``score`` is the one it gives (1.0 reads "a perfect match")."""
    with pool.connection() as conn:
        memories, held, whole = nearness_and_keywords(conn, table, owner_key, query, vector)
    texts = {hit.memory_id: hit.text for hit in memories}
    ranked = rank_memories(
        [(hit.memory_id, hit.score or 0.0) for hit in memories],
        held,
        whole,
        min_score,
        question=query,
        texts=[hit.text for hit in memories],
    )
    return [MemoryHit(memory_id, texts[memory_id], score) for memory_id, score in ranked[:limit]]


def rank_memories(
    memories: Sequence[tuple[str, float]],
    keyword: Mapping[str, Sequence[float]],
    whole: float,
    min_score: float,
    *,
    keyword_weight: float = KEYWORD_WEIGHT,
    neighbour_weight: float = NEIGHBOUR_WEIGHT,
    neighbours: int = NEIGHBOURS,
    question: str = "",
    texts: Sequence[str] | None = None,
    speaker_weight: float = SPEAKER_WEIGHT,
    date_weight: float = DATE_WEIGHT,
) -> list[tuple[str, float]]:
    """The owner's memories that answer a question, best first, each with its score in [0, 1].

    ``memories``: every memory of the owner as (memory id, cosine similarity to the
    question), in the order they were made; ``keyword``: for each memory that holds
    any of the question's tokens, the weight of each token it holds, in the question's
    order, 0 for those it does not (:func:`keyword_weights`); ``whole``: what the whole
    question weighs.

    A memory's own score is its nearness (its cosine, rescaled so that the owner's
    average memory reads 0 and an identical vector 1) and the share of the question's
    keyword weight it holds, weighed ``keyword_weight`` to 1 and averaged: a
    memory that is the question, word for word, scores 1. When ``texts`` read as
    lines of a transcript (:func:`~memjobs_worker.memory.engine.turns.speaker_of`),
    a turn's keywords are read with those of the turns among the ``neighbours``
    memories made just before it, each token counted once: a turn of conversation
    says what it says after the turns it answers ("Yes, that sunrise last year"
    after "Have you been painting?" holds "paint" for "What did Melanie paint?");
    a remembered fact is read alone. Memories come in
    conversations, and the turn that answers is often beside the turns that say
    what it is about ("What did Melanie paint?" is answered by "Yes, that sunrise
    last year", after "Have you been painting?"): each memory also takes
    ``neighbour_weight`` of the best own score among the ``neighbours``
    memories made just before and after it (measured on LoCoMo's development
    conversations: docs/benchmarks.md), as far as it relates to the question itself
    (:data:`RELATED`).

    When ``texts`` (the memories' texts, in the same order) read as lines of a
    transcript (:mod:`~memjobs_worker.memory.engine.turns`), a memory that relates
    to the question gains ``speaker_weight`` when it was said by the person
    ``question`` names first, and ``date_weight`` when its stamp falls on a date
    the question names (a named day also takes the day after: a turn tells of
    "yesterday"). The score shown is that sum, at most 1.

    The floor: a memory is left out when its score before those two gains is
    :data:`FLOOR` or less (they order what relates, they do not make a memory
    relate), or when its cosine is under ``min_score`` and it holds no keyword of
    the question.
    """
    if not memories:
        return []
    mean = sum(cosine for _, cosine in memories) / len(memories)
    span = max(1.0 - mean, 1e-9)
    speakers = [speaker_of(text) for text in texts] if texts is not None else [None] * len(memories)
    shares = _keyword_shares(
        [keyword.get(m) for m, _ in memories], whole, [s is not None for s in speakers], neighbours
    )
    own = [
        ((cosine - mean) / span + keyword_weight * share) / (1.0 + keyword_weight)
        for (_, cosine), share in zip(memories, shares, strict=True)
    ]
    gains = _gains(question, texts, speakers, speaker_weight, date_weight) if texts is not None else None
    scored = []
    for i, (memory_id, cosine) in enumerate(memories):
        if cosine < min_score and not any(keyword.get(memory_id, ())):
            continue
        beside = own[max(0, i - neighbours) : i] + own[i + 1 : i + 1 + neighbours]
        related = min(1.0, max(0.0, own[i] / RELATED))
        score = own[i] + neighbour_weight * related * max([0.0, *beside])
        if score > FLOOR:
            scored.append((score + (related * gains[i] if gains else 0.0), i, memory_id))
    scored.sort(key=lambda s: (-s[0], s[1]))
    return [(memory_id, min(1.0, score)) for score, _, memory_id in scored]


def _keyword_shares(
    held: Sequence[Sequence[float] | None], whole: float, turns: Sequence[bool], before: int
) -> list[float]:
    """Each memory's share of the question's keyword weight (``whole``, at most 1), from the
    tokens it holds and, when it is a turn (``turns``), those the turns among the ``before``
    memories made just before it hold, back to the first memory that is not a turn
    (``held``: the weight of each token a memory holds, 0 for those it does not; None when
    it holds none)."""
    if whole <= 0:
        return [0.0] * len(held)
    shares = []
    for i in range(len(held)):
        first = i
        while turns[i] and first > max(0, i - before) and turns[first - 1]:
            first -= 1
        window = [h for h in held[first : i + 1] if h]
        shares.append(min(1.0, sum(max(weights) for weights in zip(*window, strict=True)) / whole) if window else 0.0)
    return shares


def _gains(
    question: str, texts: Sequence[str], speakers: Sequence[str | None], speaker_weight: float, date_weight: float
) -> list[float] | None:
    """What each memory (of ``texts``, said by ``speakers``) gains from being said by the person
    ``question`` names and on a date it names (:func:`rank_memories`); None when it names neither."""
    named = named_speaker(question, {s for s in speakers if s}) if speaker_weight else None
    # A named day also covers the day after: "last night" is told the next day.
    days = (
        [(first, last + _DAY if first == last else last) for first, last in date_spans(question)] if date_weight else []
    )
    if named is None and not days:
        return None
    gains = [speaker_weight if named is not None and s == named else 0.0 for s in speakers]
    if days:
        for i, text in enumerate(texts):
            stamp = stamp_of(text)
            if stamp is not None and any(first <= stamp <= last for first, last in days):
                gains[i] += date_weight
    return gains


class BinaryVector(bytes):
    """A vector in pgvector's binary form (its dimension, a reserved 0, then big-endian
    float4s), sent as a binary parameter whose type the server infers (``%b::vector``):
    cheaper than the text form, whose 384 floats each go through ``repr``."""

    @classmethod
    def of(cls, vector: Sequence[float]) -> BinaryVector:
        values = np.asarray(vector, dtype=">f4")
        return cls(struct.pack(">HH", len(values), 0) + values.tobytes())


class _BinaryVectorDumper(Dumper):
    format = pq.Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return bytes(obj)


psycopg.adapters.register_dumper(BinaryVector, _BinaryVectorDumper)


def nearness_and_keywords(
    conn: Any, table: str, owner_key: str, query: str, vector: Sequence[float]
) -> tuple[list[MemoryHit], dict[str, tuple[float, ...]], float]:
    """:func:`similarities` and :func:`keyword_weights` in one statement (one round trip,
    one scan of the owner's rows): what recall asks for each question."""
    tokens = _searchable(query)
    if not tokens:
        return similarities(conn, table, owner_key, vector), {}, 0.0
    kinds = tuple(is_unspaced_token(t) for t in tokens)
    params = _keyword_params(tokens, kinds)
    rows = conn.execute(
        _fused_statement(table, kinds), (BinaryVector.of(vector), owner_key, *params, *params), prepare=True
    ).fetchall()
    memories = [MemoryHit(str(r[0]), r[1], float(r[2])) for r in rows if r[1] and r[2] is not None]
    holding = [r for r in rows if True in r[3]]
    if not holding:
        return memories, {}, 0.0
    return (memories, *_weights(len(rows), rows[0][4], [(str(r[0]), r[1], r[3]) for r in holding], len(tokens)))


def similarities(conn: Any, table: str, owner_key: str, vector: Sequence[float]) -> list[MemoryHit]:
    """Every memory of the owner with its cosine similarity to ``vector`` (as ``score``),
    in the order they were made."""
    rows = conn.execute(_nearness_statement(table), (BinaryVector.of(vector), owner_key), prepare=True).fetchall()
    return [MemoryHit(str(r[0]), r[1], float(r[2])) for r in rows if r[1] and r[2] is not None]


def keyword_weights(conn: Any, table: str, owner_key: str, query: str) -> tuple[dict[str, tuple[float, ...]], float]:
    """The keyword side, in one round trip: for each of the owner's memories that holds any of the
    question's tokens (by id), the weight of each token it holds, in the question's order, 0 for
    those it does not; and what the whole question weighs (a token no memory holds weighs as if
    one did; a stop word weighs nothing).

    One round trip: the owner's memory count and, for each memory holding any token, which tokens
    it holds; weights are computed here (:func:`~memjobs_worker.ranking.idf`).
    """
    tokens = _searchable(query)
    if not tokens:
        return {}, 0.0
    kinds = tuple(is_unspaced_token(t) for t in tokens)
    params = _keyword_params(tokens, kinds)
    rows = conn.execute(_keyword_statement(table, kinds), (owner_key, *params, *params)).fetchall()
    if not rows:
        return {}, 0.0
    return _weights(int(rows[0][0]), rows[0][1], [(str(r[2]), r[3], r[4]) for r in rows], len(tokens))


def _searchable(query: str) -> list[str]:
    return [t for t in query_tokens(query) if is_searchable(t)][:MAX_QUERY_TOKENS]


def _keyword_params(tokens: Sequence[str], kinds: Sequence[bool]) -> list[str]:
    return [p for t, unspaced in zip(tokens, kinds, strict=True) for p in ("simple" if unspaced else "english", t)]


# The statements are rendered once per table and shape of question (which of its tokens
# are Chinese): composing them took a third of recall's own CPU, the model aside.


@functools.lru_cache(maxsize=8)
def _nearness_statement(table: str) -> bytes:
    return (
        sql.SQL(
            "SELECT id, payload->>'data', 1 - (vector <=> %b::vector) FROM {} "
            "WHERE payload->>'user_id' = %s ORDER BY (payload->>'created_at')::timestamptz, id"
        )
        .format(sql.Identifier(table))
        .as_bytes()
    )


@functools.lru_cache(maxsize=512)
def _fused_statement(table: str, kinds: tuple[bool, ...]) -> bytes:
    parsed, holds, words = _keyword_sql(kinds)
    return (
        sql.SQL(
            "WITH owned AS MATERIALIZED (SELECT id, payload->>'data' AS text, 1 - (vector <=> %b::vector) AS near,"
            " (payload->>'created_at')::timestamptz AS made, {parsed} FROM {table} WHERE payload->>'user_id' = %s),"
            " words AS (SELECT ARRAY[{words}] AS w)"
            " SELECT id, text, near, ARRAY[{holds}], (SELECT w FROM words) FROM owned ORDER BY made, id"
        )
        .format(parsed=parsed, table=sql.Identifier(table), holds=holds, words=words)
        .as_bytes()
    )


@functools.lru_cache(maxsize=512)
def _keyword_statement(table: str, kinds: tuple[bool, ...]) -> bytes:
    parsed, holds, words = _keyword_sql(kinds)
    return (
        sql.SQL(
            "WITH owned AS MATERIALIZED (SELECT id, payload->>'data' AS text, {parsed}"
            " FROM {table} WHERE payload->>'user_id' = %s),"
            " held AS (SELECT id, text, ARRAY[{holds}] AS holds FROM owned)"
            " SELECT (SELECT count(*) FROM owned), ARRAY[{words}], id, text, holds FROM held"
            " WHERE true = ANY(holds)"
        )
        .format(parsed=parsed, table=sql.Identifier(table), holds=holds, words=words)
        .as_bytes()
    )


def _keyword_sql(kinds: Sequence[bool]) -> tuple[sql.Composable, sql.Composable, sql.Composable]:
    """The keyword side's SQL for tokens of ``kinds`` (True: Chinese): each memory's text
    parsed once per configuration the question needs, whether it holds each token, and
    whether each token survives the text search (a stop word does not); either list
    takes :func:`_keyword_params`."""
    queries = [sql.SQL("plainto_tsquery(%s::regconfig, %s)") for _ in kinds]
    holds = sql.SQL(", ").join(
        sql.SQL("{} @@ {}").format(sql.Identifier("s" if unspaced else "e"), q)
        for unspaced, q in zip(kinds, queries, strict=True)
    )
    parsed = sql.SQL(", ").join(
        [sql.SQL("to_tsvector('english', {lem}) AS e").format(lem=sql.SQL(_LEMMAS))] * (False in kinds)
        + [sql.SQL("to_tsvector('simple', {lem}) AS s").format(lem=sql.SQL(_LEMMAS))] * (True in kinds)
    )
    words = sql.SQL(", ").join(sql.SQL("numnode({}) > 0").format(q) for q in queries)
    return parsed, holds, words


def _weights(
    total: int, words: Sequence[bool], holding: Sequence[tuple[str, str | None, Sequence[bool]]], n: int
) -> tuple[dict[str, tuple[float, ...]], float]:
    """Each memory's token weights and the question's, from the owner's memory count
    (``total``), which tokens survive the text search, and (id, text, which tokens it
    holds) for each memory holding any of the ``n`` tokens."""
    containing = [sum(1 for _, _, h in holding if h[i]) for i in range(n)]
    weights = [idf(total, c) for c in containing]
    held = {m: tuple(w if h else 0.0 for w, h in zip(weights, hs, strict=True)) for m, text, hs in holding if text}
    return held, question_weight(total, containing, words)
