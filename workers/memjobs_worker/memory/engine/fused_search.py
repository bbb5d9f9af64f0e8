"""Recall over mem0's collection: vectors and keywords, merged by RRF.

What: :func:`fused_search` ranks one owner's memories for a question twice —
by cosine similarity to the question's vector, and by the question's words
and Chinese character pairs in PostgreSQL full text — and merges the two by
reciprocal rank fusion (:func:`memjobs_worker.ranking.fuse`), as knowledge
search does. A memory's ``score`` is its fused score.

Why both: the embedding finds what a question means in other words or the
other language ("what am I allergic to?" → 我对花生过敏); the keywords find
what an embedding blurs: names, numbers, exact phrases (docs/embeddings.md
has the figures of each alone and fused).

How the keywords are stored: mem0 keeps, beside each memory's text, a
"lemmatised" copy it searches with ``to_tsvector('simple', …)``. memjobs
hands mem0 :func:`memjobs_worker.tokens.index_tokens` as that lemmatiser
(see :func:`patch_mem0_tokens`), so the copy holds knowledge's tokens: words,
and each Chinese character and pair. A question is looked up token by token
(:func:`memjobs_worker.tokens.query_tokens`), each weighted by its rarity among
the owner's memories (:func:`memjobs_worker.ranking.idf`), words through
PostgreSQL's ``english`` configuration (stemmed, stop words weigh nothing) and
Chinese through ``simple``. The search is exact over the owner's rows (mem0's
collection is indexed by owner: see ``_index_by_owner``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import sql
from psycopg_pool import ConnectionPool

from memjobs_worker.memory.engine.base import MemoryHit
from memjobs_worker.ranking import MIN_SHOULD_MATCH, fuse, idf, question_weight
from memjobs_worker.tokens import index_tokens, is_searchable, is_unspaced_token, query_tokens

#: Each ranking reads at least this many of the owner's memories before fusion.
MIN_CANDIDATES = 50
#: At most this many question tokens are looked up.
MAX_QUERY_TOKENS = 64

_LEMMAS = "coalesce(payload->>'text_lemmatized', payload->>'data')"


def patch_mem0_tokens(mem0_main: Any) -> None:
    """Make mem0 store :func:`~memjobs_worker.tokens.index_tokens` as each memory's
    keyword form (``text_lemmatized``) instead of spaCy lemmas (memjobs installs
    no spaCy, so it stored the raw text, one unsearchable "word" per Chinese sentence)."""
    mem0_main.lemmatize_for_bm25 = index_tokens


def fused_search(pool: ConnectionPool[Any], table: str, owner_key: str, query: str,
                 vector: Sequence[float], limit: int, min_score: float) -> list[MemoryHit]:
    """The owner's ``limit`` best memories for ``query`` (whose vector is ``vector``).

    Memories whose cosine similarity is under ``min_score`` are left out of the
    vector ranking (a keyword match still counts)."""
    candidates = max(limit, MIN_CANDIDATES)
    with pool.connection() as conn:
        by_vector = nearest(conn, table, owner_key, vector, candidates, min_score)
        by_keyword = keyword_ranking(conn, table, owner_key, query, candidates)
    fused = fuse([by_vector, by_keyword], key=lambda hit: hit.memory_id)
    return [MemoryHit(hit.memory_id, hit.text, score) for hit, score in fused[:limit]]


def nearest(conn: Any, table: str, owner_key: str, vector: Sequence[float], limit: int,
             min_score: float) -> list[MemoryHit]:
    """The vector ranking: the owner's memories nearest ``vector`` (cosine), at least ``min_score``."""
    rows = conn.execute(
        sql.SQL("SELECT id, payload->>'data', 1 - (vector <=> %s::vector) AS score FROM {} "
                "WHERE payload->>'user_id' = %s ORDER BY vector <=> %s::vector, id LIMIT %s")
        .format(sql.Identifier(table)),
        (vector, owner_key, vector, limit)).fetchall()
    return [MemoryHit(str(r[0]), r[1], float(r[2])) for r in rows
            if r[1] and r[2] is not None and float(r[2]) >= min_score]


def keyword_ranking(conn: Any, table: str, owner_key: str, query: str, limit: int) -> list[MemoryHit]:
    """The keyword ranking, in one round trip: the owner's memory count and, for each memory holding any
    token, which tokens it holds; weights, the share matched and the order are computed here.

    A memory is kept when the tokens it holds carry at least :data:`MIN_SHOULD_MATCH`
    of the question's weight (a token no memory holds weighs as if one did; a stop
    word weighs nothing): "馒头" or "Corolla" find their memory, while one shared
    "我的" or "work" out of a whole question does not outvote the vector ranking.
    """
    tokens = [t for t in query_tokens(query) if is_searchable(t)][:MAX_QUERY_TOKENS]
    if not tokens:
        return []
    queries = [sql.SQL("plainto_tsquery(%s::regconfig, %s)") for _ in tokens]
    holds = [sql.SQL("{} @@ {}").format(sql.Identifier("s" if is_unspaced_token(t) else "e"), q)
             for t, q in zip(tokens, queries, strict=True)]
    params: list[Any] = [p for t in tokens for p in ("simple" if is_unspaced_token(t) else "english", t)]
    rows = conn.execute(
        sql.SQL(
            "WITH owned AS MATERIALIZED (SELECT id, payload->>'data' AS text,"
            " to_tsvector('english', {lem}) AS e, to_tsvector('simple', {lem}) AS s"
            " FROM {table} WHERE payload->>'user_id' = %s),"
            " held AS (SELECT id, text, ARRAY[{holds}] AS holds FROM owned)"
            " SELECT (SELECT count(*) FROM owned), ARRAY[{words}], id, text, holds FROM held"
            " WHERE true = ANY(holds)"
        ).format(lem=sql.SQL(_LEMMAS), table=sql.Identifier(table), holds=sql.SQL(", ").join(holds),
                 words=sql.SQL(", ").join(sql.SQL("numnode({}) > 0").format(q) for q in queries)),
        (owner_key, *params, *params)).fetchall()
    if not rows:
        return []
    total, words = int(rows[0][0]), rows[0][1]
    containing = [sum(1 for r in rows if r[4][i]) for i in range(len(tokens))]
    weights = [idf(total, n) for n in containing]
    # What the whole question weighs: a token no memory holds as if one did, a stop word nothing.
    whole = question_weight(total, containing, words)
    scored = [(sum(w for w, held in zip(weights, r[4], strict=True) if held), str(r[2]), r[3])
              for r in rows if r[3]]
    kept = [s for s in scored if s[0] > 0 and s[0] >= MIN_SHOULD_MATCH * whole]
    kept.sort(key=lambda s: (-s[0], s[1]))
    return [MemoryHit(memory_id, text, score) for score, memory_id, text in kept[:limit]]
