"""The embedder a process uses, chosen from settings, and the identity of its vectors.

What: :func:`build_embedder` returns the configured embedding service when
``MEMJOBS_EMBEDDING_BASE_URL`` is set, else the local model
(:class:`~memjobs_worker.embedding.local.LocalEmbedder`, the embedded default),
or the hashed embedder when ``MEMJOBS_LOCAL_EMBEDDER=hashing``. All three have
mem0's embedder shape (``embed(text, memory_action)``, ``embed_batch``);
``memory_action="search"`` marks a question. :func:`model_id` names what made
a vector, so stored vectors can be checked against the current embedder
(:mod:`memjobs_worker.embedding.record`).

Why a package below the features: personal memory and knowledge both embed
with it, and neither may import the other.
"""

from __future__ import annotations

from typing import Any

from memjobs_worker.embedding.fair import BoundedEmbedder, ModelShare
from memjobs_worker.model_breaker import ModelBreaker
from memjobs_worker.settings import ApiSettings, EmbeddingSettings, ModelSettings

#: The identity of the hashed embedder's vectors (its features and hashing are fixed).
HASHING_ID = "hashing-v1"


def model_id(embedding: EmbeddingSettings) -> str:
    """What makes this stack's vectors: recorded beside them, compared at start-up."""
    if embedding.configured:
        return f"service:{embedding.model}"
    if embedding.local_embedder == "e5":
        from memjobs_worker.embedding.local import MODEL_ID

        return MODEL_ID
    return HASHING_ID


def model_share(embedding: EmbeddingSettings, api: ApiSettings) -> ModelShare:
    """The model slots of one process (:class:`~memjobs_worker.embedding.fair.ModelShare`):
    ``MEMJOBS_EMBEDDING_SLOTS`` at once (``MEMJOBS_EMBEDDING_SERVICE_SLOTS`` with an
    embedding service), ``MEMJOBS_API_MODEL_PER_OWNER`` requests per owner."""
    return ModelShare(slots=embedding.share_slots, per_party=api.model_per_owner)


def build_embedder(
    model: ModelSettings,
    embedding: EmbeddingSettings,
    share: ModelShare | None = None,
    breaker: ModelBreaker | None = None,
) -> Any:
    """The embedding service, the local model, or the hashed embedder (in that order
    of precedence); the local model loads on first use. The service and the local
    model take turns on ``share`` (when none is given, a new one of
    ``MEMJOBS_EMBEDDING_SLOTS``: its per-owner bound counts only the API's
    requests, made on the process's share; ``MEMJOBS_EMBEDDING_SERVICE_SLOTS`` with
    a service) and get at most
    ``MEMJOBS_EMBEDDING_MAX_CHARS`` characters of a text
    (:class:`~memjobs_worker.embedding.fair.BoundedEmbedder`). ``breaker``: the
    embedding service's circuit breaker (:func:`memjobs_worker.model_breaker.breakers`).

    Raises:
        ConfigurationError: the local model is chosen but not installed here
            (raised on first use, naming the two ways out).
    """
    from memjobs_worker.model_client import remote_embedder

    share = share or ModelShare(slots=embedding.share_slots)
    remote = remote_embedder(model, embedding, breaker)
    if remote is not None:
        return BoundedEmbedder(remote, share, embedding.max_chars)
    if embedding.local_embedder == "e5":
        from memjobs_worker.embedding.local import LocalEmbedder

        return BoundedEmbedder(
            LocalEmbedder(embedding.local_embedder_threads),
            share,
            embedding.max_chars,
            batch_queries=embedding.batch_queries,
        )
    from memjobs_worker.embedding.hashing import HashingEmbedder

    return HashingEmbedder(embedding.offline_dims)


def semantic(embedding: EmbeddingSettings) -> bool:
    """Whether knowledge embeds its chunks: with an embedding service or the local
    model, not with the hashed embedder (its vectors are lexical: keywords already
    find what they would).

    Hybrid knowledge search keeps in its keyword ranking only chunks that hold
    half the query's weight (:data:`memjobs_worker.ranking.MIN_SHOULD_MATCH`):
    without that rule, fusing the local model's ranking lowered top-1 on
    knowledge's ranking checks from 0.97 to 0.94 (docs/embeddings.md, "Knowledge").
    """
    return embedding.configured or embedding.local_embedder == "e5"
