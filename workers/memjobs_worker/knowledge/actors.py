"""Knowledge's actor: reindex_knowledge, one per owner at a time.

The owner's reindex runs under the lease lock (:mod:`memjobs_worker.lease`,
under the name ``reindex``). Each message carries a whole corpus, so a second
one for the same owner is retried later rather than merged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import dramatiq
import redis

from memjobs_client import contracts
from memjobs_client.errors import TransientError
from memjobs_worker.jobs import Actors, declare, parse, report
from memjobs_worker.knowledge.reindex import reindex
from memjobs_worker.knowledge.store import KnowledgeStore
from memjobs_worker.lease import LeaseLock
from memjobs_worker.model_client import RemoteEmbedder
from memjobs_worker.observability.metrics import lock_hook
from memjobs_worker.settings import Settings

log = logging.getLogger(__name__)


def declare_knowledge_actors(
    broker: dramatiq.Broker,
    settings: Settings,
    *,
    redis_client: Callable[[], redis.Redis],
    store: Callable[[], KnowledgeStore],
    embedder: Callable[[], RemoteEmbedder | None],
) -> Actors:
    """Register the knowledge actor; the callables return their parts, built on first use."""

    def reindex_knowledge(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.ReindexKnowledge, args, kwargs)
        if not settings.knowledge_enabled:
            report("disabled")
            return
        lock = LeaseLock(redis_client(), "reindex", payload.owner_key, lease_ms=settings.lease_ms,
                         on_event=lock_hook("reindex"))
        if lock.try_acquire() is None:
            raise TransientError("another reindex of this owner is running", reason="reindex_busy")
        try:
            with lock:
                service = embedder()
                done = reindex(payload, store=store(),
                               embed=service.embed_batch if service is not None else None,
                               dims=settings.embedding_dims if service is not None else None,
                               settings=settings)
        finally:
            lock.abandon()
        log.info("reindex", extra={"owner_key": payload.owner_key, "indexed": done.indexed,
                                   "unchanged": done.unchanged, "removed": done.removed,
                                   "refused": sorted(done.refused.values()), "chunks": done.chunks,
                                   "embedding_calls": done.embedding_calls})
        report("succeeded")

    return declare(broker, settings, [
        (contracts.ACTOR_REINDEX, reindex_knowledge, {"time_limit": 3_600_000}),
    ])
