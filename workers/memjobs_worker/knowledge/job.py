"""The ``reindex_knowledge`` job: the owner's lock, the reindex, one log line.

What: :func:`run_reindex` is the body of the actor, so the actor only parses
the message and reports the outcome this returns.

Why the lock waits a little for parts: a large corpus arrives as several
messages at once, and they serialise on the owner's lock; a part finding the
lock busy waits up to :data:`PART_WAIT_S` for the part before it to finish
rather than spend one of its retries on every collision. A whole-corpus
message still retries at once (``reindex_busy``).

The log line counts documents and reasons; it never carries a path, a title
or the owner id. The owner's reindex record (:mod:`memjobs_client.reindexing`)
says ``indexing`` while a part runs and ends with the last part, so that
``knowledge list`` shows the documents being indexed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import redis

from memjobs_client import reindexing
from memjobs_client.contracts import ReindexKnowledge
from memjobs_client.errors import TransientError
from memjobs_client.redis_seam import redis_best_effort
from memjobs_worker.embedding import model_id
from memjobs_worker.knowledge.build import KnowledgeParts
from memjobs_worker.knowledge.cache import EmbeddingCache
from memjobs_worker.knowledge.parts import CorpusParts
from memjobs_worker.knowledge.reindex import reindex
from memjobs_worker.lease import LeaseLock
from memjobs_worker.observability.metrics import lock_hook
from memjobs_worker.settings import EmbeddingSettings, KnowledgeSettings

log = logging.getLogger(__name__)

#: How long a part waits for the owner's lock before it is retried later.
PART_WAIT_S = 60.0
_POLL_S = 0.2


def _progress(step: Callable[[redis.Redis, str], None], client: redis.Redis, owner_key: str) -> None:
    """Keep the owner's reindex record; a Redis that does not answer it costs
    the record, not the reindex (the lock's own calls say an outage)."""
    with redis_best_effort() as attempt:
        step(client, owner_key)
    if attempt.failed:
        log.warning("reindex progress not recorded", extra={"owner_key": owner_key})


def run_reindex(
    payload: ReindexKnowledge,
    *,
    knowledge: KnowledgeSettings,
    embedding: EmbeddingSettings,
    lease_ms: int,
    parts: KnowledgeParts,
) -> str:
    """Index ``payload`` for its owner under the owner's reindex lock (a lease of
    ``lease_ms``); the job's outcome.
    The store and the embedder of ``parts`` are read (so built) under the lock only.

    Raises:
        TransientError: another reindex of this owner holds the lock (``reindex_busy``).
        ModelUnavailable: the embedding service failed (nothing of this message written).
    """
    if not knowledge.enabled:
        return "disabled"  # switched off since it was enqueued, or a hand-made message
    redis_client = parts.redis
    lock = LeaseLock(redis_client, "reindex", payload.owner_key, lease_ms=lease_ms, on_event=lock_hook("reindex"))
    deadline = time.monotonic() + (PART_WAIT_S if payload.part is not None else 0.0)
    while lock.try_acquire() is None:
        if time.monotonic() >= deadline:
            # Each message carries a whole corpus (or part): retry it later rather than merge.
            raise TransientError("another reindex of this owner is running", reason="reindex_busy")
        time.sleep(_POLL_S)
    _progress(reindexing.mark_indexing, redis_client, payload.owner_key)
    try:
        with lock:
            service = parts.knowledge_embedder
            corpus = parts.knowledge
            cache = None
            if service is not None:
                cache = EmbeddingCache(corpus.engine, model_id(embedding), embedding.vector_dims)
                cache.prune()  # attempts that never succeeded, of any owner
            done = reindex(
                payload,
                store=corpus,
                embed=service.embed_batch if service is not None else None,
                dims=embedding.vector_dims if service is not None else None,
                knowledge=knowledge,
                parts=CorpusParts(redis_client).record,
                cache=cache,
            )
    finally:
        lock.abandon()
    _progress(reindexing.part_done, redis_client, payload.owner_key)
    part = payload.part
    log.info(
        "reindex",
        extra={
            "owner_key": payload.owner_key,
            "indexed": done.indexed,
            "unchanged": done.unchanged,
            "removed": done.removed,
            "refused": done.refusal_counts(),
            "chunks": done.chunks,
            "embedding_calls": done.embedding_calls,
            "embedded_chunks": done.embedded_chunks,
            "cached_chunks": done.cached_chunks,
            "part": f"{part.index}/{part.count}" if part is not None else None,
            "complete": done.complete,
        },
    )
    return "succeeded"
