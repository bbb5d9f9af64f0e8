"""Knowledge's actor: reindex_knowledge, one per owner at a time (the job's
body, its lock and its log line are in :mod:`memjobs_worker.knowledge.job`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import dramatiq
import redis

from memjobs_client import contracts
from memjobs_worker.jobs import Actors, declare, parse, report
from memjobs_worker.knowledge.job import run_reindex
from memjobs_worker.knowledge.store import KnowledgeStore
from memjobs_worker.model_client import RemoteEmbedder
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
    rules = settings.source_rules()

    def reindex_knowledge(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.ReindexKnowledge, args, kwargs, rules)
        report(run_reindex(payload, settings=settings, redis_client=redis_client(), store=store, embedder=embedder))

    return declare(
        broker,
        settings,
        [
            (contracts.ACTOR_REINDEX, reindex_knowledge, {"time_limit": settings.knowledge_reindex_time_limit_ms}),
        ],
    )
