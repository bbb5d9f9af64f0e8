"""Rank fusion and term weights, shared by knowledge search and personal recall.

What: :func:`fuse` merges rankings by reciprocal rank fusion; :func:`idf` is
BM25's weight of a term by how many of a collection's items contain it;
:func:`question_weight` and :data:`MIN_SHOULD_MATCH` decide which items a
keyword ranking keeps when it is fused with a vector ranking.

Why here: knowledge ranks chunks and personal memory ranks memories, each by
keywords (PostgreSQL full text over :mod:`memjobs_worker.fulltext`, weighted by
:func:`idf`) and by vectors; knowledge merges the two by :func:`fuse`, recall by
scores of its own (:mod:`memjobs_worker.memory.engine.fused_search`). The two
features may not import each other, so what they share sits below them. RRF uses positions only, so
two scores on unrelated scales (``ts_rank_cd``, a token-weight sum, cosine
similarity) merge without calibration (DESIGN.md, "Knowledge (K)").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

#: The RRF constant: a hit at position r (from 1) scores 1 / (RRF_K + r).
RRF_K = 60

#: The share of a question's token weight an item must hold to enter a keyword
#: ranking that is fused with a vector ranking (Elasticsearch's "minimum should
#: match", at its common 50 %): one shared "我的" or "work" out of a whole
#: question does not outvote the vector ranking, while "馒头" or "Corolla" still
#: find their item. Hybrid knowledge search applies it; recall, which scores each
#: memory by the share of the question's weight it holds (issue 32), does not.
MIN_SHOULD_MATCH = 0.5

H = TypeVar("H")


def fuse(rankings: Sequence[Sequence[H]], k: int = RRF_K, *, key: Callable[[H], Hashable]) -> list[tuple[H, float]]:
    """Merge rankings by reciprocal rank fusion, items identified by ``key``.

    An item scores the sum of ``1 / (k + position)`` over the rankings it
    appears in (positions from 1; a repeat within one ranking counts once).
    Ties go to the better single position, then to the key, so the result is
    deterministic (keys must be mutually orderable). The hit kept is the first
    one seen.
    """
    scores: dict[Hashable, float] = {}
    best: dict[Hashable, int] = {}
    hits: dict[Hashable, H] = {}
    for ranking in rankings:
        seen: set[Hashable] = set()
        position = 0
        for hit in ranking:
            item = key(hit)
            if item in seen:
                continue
            seen.add(item)
            position += 1
            hits.setdefault(item, hit)
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + position)
            best[item] = min(best.get(item, position), position)
    order = sorted(scores, key=lambda item: (-scores[item], best[item], item))
    return [(hits[item], scores[item]) for item in order]


def idf(items: int, containing: int) -> float:
    """BM25's inverse document frequency (over ``items``); 0 for a term no item has."""
    if containing <= 0:
        return 0.0
    return math.log(1.0 + (items - containing + 0.5) / (containing + 0.5))


def question_weight(items: int, containing: Sequence[int], indexed: Sequence[bool]) -> float:
    """What a whole question weighs, for :data:`MIN_SHOULD_MATCH`: the sum of its
    tokens' :func:`idf` over ``items``, a token no item holds (``containing`` 0)
    weighing as if one did, and a token the text search drops (not ``indexed``: a
    stop word) nothing."""
    floor = idf(items, 1)
    return sum((idf(items, n) or floor) for n, kept in zip(containing, indexed, strict=True) if kept)
