"""Hybrid knowledge search: keyword and vector rankings merged by RRF.

What: :func:`search_knowledge` ranks an owner's chunks for a query by
keywords and, when an embedding function is given, by cosine similarity, and
merges the two by reciprocal rank fusion (:func:`fuse`). Fused with vectors,
the keyword ranking keeps only chunks holding half the query's token weight
(:data:`~memjobs_worker.ranking.MIN_SHOULD_MATCH`, as recall does): a long
document sharing one word of a question ("meeting", "水") no longer joins the
vector ranking's near hits to beat the note both should find. By keywords
alone (no embedder) every chunk holding a token still ranks.

Why RRF: the two scores (``ts_rank_cd`` and cosine similarity) are not on
comparable scales; RRF uses only positions, so a chunk ranked well by both
wins over one ranked first by only one (DESIGN.md, "Knowledge (K)").

Results carry the document's public ``source_label`` (never a file path) and
are always marked ``untrusted_external``: the model must treat them as data.

One result per document by default: each ranking is first reduced to its
documents, in the order of their best chunk, the document rankings are fused,
and each document is shown by its best chunk (the one with the highest fused
chunk score). So a long document cannot fill the results with its chunks;
``all_chunks=True`` fuses and returns chunks instead.

A query is user input bound for a model service: it goes through the same
sensitivity check as every ingest (a query carrying a secret is refused with
``sensitive_content`` before any embedding call), and is cut to
:data:`~memjobs_worker.knowledge.queries.MAX_QUERY_CHARS` characters for both
the keyword and the embedding ranking.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from memjobs_client.errors import InvalidPayload, ModelUnavailable
from memjobs_client.sensitive import ensure_not_sensitive
from memjobs_worker.knowledge.citations import chunk_id
from memjobs_worker.knowledge.queries import MAX_QUERY_CHARS
from memjobs_worker.knowledge.records import ChunkHit
from memjobs_worker.knowledge.store import KnowledgeStore
from memjobs_worker.ranking import MIN_SHOULD_MATCH
from memjobs_worker.ranking import RRF_K as RRF_K
from memjobs_worker.ranking import fuse as rrf

#: Each ranking fetches this many chunks at least (more for a large k), so that
#: enough distinct documents remain once chunks are collapsed per document.
MIN_CANDIDATES = 50
#: The most results a search returns.
MAX_K = 50

NO_EMBEDDING_NOTICE = "no semantic embedder (the hashed one, and no embedding service): ranked by keywords alone"
EMBEDDING_FAILED_NOTICE = "the embedding service did not answer: ranked by keywords alone"


@dataclass
class KnowledgeResult:
    """One result as the model sees it: text, fused score (1: ranked first by every
    ranking; :func:`scored`), title and public label;
    ``chunk_id`` cites this version of the chunk (:mod:`~memjobs_worker.knowledge.citations`)."""

    text: str
    score: float
    title: str
    source: str
    trust: Literal["untrusted_external"] = "untrusted_external"
    chunk_id: str = ""


@dataclass(frozen=True)
class SearchOutcome:
    """The results, how they were ranked, and a notice when ranking was degraded."""

    results: list[KnowledgeResult] = field(default_factory=list)
    mode: Literal["hybrid", "keyword"] = "keyword"
    notice: str | None = None


Key = tuple[str, int]


def fuse(
    rankings: Sequence[Sequence[ChunkHit]],
    k: int = RRF_K,
    *,
    key: Callable[[ChunkHit], Key] = lambda hit: (hit.doc_id, hit.chunk_index),
) -> list[tuple[ChunkHit, float]]:
    """:func:`memjobs_worker.ranking.fuse` of chunk rankings, keyed by ``key``
    (default: the chunk)."""
    return rrf(rankings, k, key=key)


def fuse_documents(rankings: Sequence[Sequence[ChunkHit]], k: int = RRF_K) -> list[tuple[ChunkHit, float]]:
    """RRF over documents (each ranking read as its documents in order of their best
    chunk), each document shown by its chunk with the highest chunk-level RRF score."""
    by_doc = fuse(rankings, k, key=lambda hit: (hit.doc_id, 0))
    shown: dict[str, ChunkHit] = {}
    for hit, _ in fuse(rankings, k):
        shown.setdefault(hit.doc_id, hit)
    return [(shown[hit.doc_id], score) for hit, score in by_doc]


class QueryEmbedder(Protocol):
    """What :func:`search_with` embeds a query with (a knowledge embedder)."""

    def embed(self, text: str, memory_action: str | None = None) -> list[float]: ...


def search_with(
    store: KnowledgeStore,
    embedder: QueryEmbedder | None,
    owner_key: str,
    query: str,
    k: int,
    *,
    all_chunks: bool = False,
) -> SearchOutcome:
    """:func:`search_knowledge` with ``embedder`` embedding the query as a search;
    ``None`` (the hashed embedder) ranks by keywords alone. Every door's search.

    Raises:
        InvalidPayload, SensitiveContent: as :func:`search_knowledge`.
    """
    embed = (lambda q: embedder.embed(q, "search")) if embedder is not None else None
    return search_knowledge(store, owner_key, query, k, all_chunks=all_chunks, embed=embed)


def search_knowledge(
    store: KnowledgeStore,
    owner_key: str,
    query: str,
    k: int,
    *,
    embed: Callable[[str], list[float]] | None,
    all_chunks: bool = False,
) -> SearchOutcome:
    """The owner's ``k`` best documents (or chunks, with ``all_chunks``) for ``query``.

    Parameters:
        embed: turns the query into a vector with the same model the chunks
            were embedded with (an embedding service or the local model);
            ``None`` with the hashed embedder, and then the notice says the
            ranking used keywords alone.
        all_chunks: rank chunks, several per document if they rank so; by
            default one result per document, its best chunk.

    When ``embed`` raises :class:`~memjobs_client.errors.ModelUnavailable` the
    search still answers, by keywords, and the notice says why.

    Raises:
        InvalidPayload: ``k`` is not between 1 and :data:`MAX_K`.
        SensitiveContent: the query looks like it carries a secret (nothing was
            sent to the embedding service).
    """
    if not 1 <= k <= MAX_K:
        raise InvalidPayload(f"k must be between 1 and {MAX_K}, got {k}")
    ensure_not_sensitive(text=query, field="query")
    query = query[:MAX_QUERY_CHARS]
    merge = fuse if all_chunks else fuse_documents
    limit = max(k * 10, MIN_CANDIDATES)
    if embed is None:
        keyword = store.keyword_search(owner_key, query, limit)
        return SearchOutcome(scored(merge([keyword]), k, 1), "keyword", NO_EMBEDDING_NOTICE)
    if not query.strip():
        return SearchOutcome([], "hybrid", None)
    try:
        vector = embed(query)
    except ModelUnavailable:
        keyword = store.keyword_search(owner_key, query, limit)
        return SearchOutcome(scored(merge([keyword]), k, 1), "keyword", EMBEDDING_FAILED_NOTICE)
    keyword = store.keyword_search(owner_key, query, limit, min_should_match=MIN_SHOULD_MATCH)
    nearest = store.vector_search(owner_key, vector, limit)
    return SearchOutcome(scored(merge([keyword, nearest]), k, 2), "hybrid", None)


def scored(fused: list[tuple[ChunkHit, float]], k: int, rankings: int) -> list[KnowledgeResult]:
    """The first ``k`` of ``fused``, each score read against the best a result of
    ``rankings`` rankings can have (first in every one): 1 for that, 0.5 for first
    in one of two and absent from the other (an RRF sum alone reads 0.033 for the
    best possible result)."""
    best = rankings / (RRF_K + 1)
    return [
        KnowledgeResult(
            text=hit.text,
            score=score / best,
            title=hit.title,
            source=hit.source_label,
            chunk_id=chunk_id(hit.doc_id, hit.chunk_index, hit.text),
        )
        for hit, score in fused[:k]
    ]
