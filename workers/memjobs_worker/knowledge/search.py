"""Hybrid knowledge search: keyword and vector rankings merged by RRF.

What: :func:`search_knowledge` ranks an owner's chunks for a query by
keywords and, when an embedding function is given, by cosine similarity, and
merges the two by reciprocal rank fusion (:func:`fuse`).

Why RRF: the two scores (``ts_rank_cd`` and cosine similarity) are not on
comparable scales; RRF uses only positions, so a chunk ranked well by both
wins over one ranked first by only one (DESIGN.md, "Knowledge (K)").

Results carry the document's public ``source_label`` (never a file path) and
are always marked ``untrusted_external``: the model must treat them as data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from memjobs_client.errors import InvalidPayload, ModelUnavailable
from memjobs_worker.knowledge.records import ChunkHit
from memjobs_worker.knowledge.store import KnowledgeStore

#: The RRF constant: a hit at position r (from 1) scores 1 / (RRF_K + r).
RRF_K = 60
#: Each ranking fetches this many hits at least (more for a large k).
MIN_CANDIDATES = 20

NO_EMBEDDING_NOTICE = "no embedding service configured: ranked by keywords alone"
EMBEDDING_FAILED_NOTICE = "the embedding service did not answer: ranked by keywords alone"


@dataclass
class KnowledgeResult:
    """One result as the model sees it: text, fused score, title and public label."""

    text: str
    score: float
    title: str
    source: str
    trust: Literal["untrusted_external"] = "untrusted_external"


@dataclass(frozen=True)
class SearchOutcome:
    """The results, how they were ranked, and a notice when ranking was degraded."""

    results: list[KnowledgeResult] = field(default_factory=list)
    mode: Literal["hybrid", "keyword"] = "keyword"
    notice: str | None = None


def fuse(rankings: Sequence[Sequence[ChunkHit]], k: int = RRF_K) -> list[tuple[ChunkHit, float]]:
    """Merge rankings by reciprocal rank fusion, keyed by (doc_id, chunk_index).

    A chunk scores the sum of ``1 / (k + position)`` over the rankings it
    appears in (positions from 1; a repeat within one ranking counts once).
    Ties go to the better single position, then to document order, so the
    result is deterministic. The hit kept is the first one seen.
    """
    scores: dict[tuple[str, int], float] = {}
    best: dict[tuple[str, int], int] = {}
    hits: dict[tuple[str, int], ChunkHit] = {}
    for ranking in rankings:
        seen: set[tuple[str, int]] = set()
        for position, hit in enumerate(ranking, start=1):
            key = (hit.doc_id, hit.chunk_index)
            if key in seen:
                continue
            seen.add(key)
            hits.setdefault(key, hit)
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + position)
            best[key] = min(best.get(key, position), position)
    order = sorted(scores, key=lambda key: (-scores[key], best[key], key))
    return [(hits[key], scores[key]) for key in order]


def search_knowledge(store: KnowledgeStore, owner_key: str, query: str, k: int, *,
                     embed: Callable[[str], list[float]] | None) -> SearchOutcome:
    """The owner's ``k`` best chunks for ``query``.

    Parameters:
        embed: turns the query into a vector with the same model the chunks
            were embedded with; ``None`` when no embedding service is
            configured, and then the notice says the ranking used keywords alone.

    When ``embed`` raises :class:`~memjobs_client.errors.ModelUnavailable` the
    search still answers, by keywords, and the notice says why.

    Raises:
        InvalidPayload: ``k`` is less than 1.
    """
    if k < 1:
        raise InvalidPayload(f"k must be at least 1, got {k}")
    limit = max(k * 4, MIN_CANDIDATES)
    keyword = store.keyword_search(owner_key, query, limit)
    if embed is None:
        return SearchOutcome(_results(fuse([keyword]), k), "keyword", NO_EMBEDDING_NOTICE)
    if not query.strip():
        return SearchOutcome([], "hybrid", None)
    try:
        vector = embed(query)
    except ModelUnavailable:
        return SearchOutcome(_results(fuse([keyword]), k), "keyword", EMBEDDING_FAILED_NOTICE)
    nearest = store.vector_search(owner_key, vector, limit)
    return SearchOutcome(_results(fuse([keyword, nearest]), k), "hybrid", None)


def _results(fused: list[tuple[ChunkHit, float]], k: int) -> list[KnowledgeResult]:
    return [KnowledgeResult(text=hit.text, score=score, title=hit.title, source=hit.source_label)
            for hit, score in fused[:k]]
