"""Knowledge's actor: reindex_knowledge, one per owner at a time (the job's
body, its lock and its log line are in :mod:`memjobs_worker.knowledge.job`)."""

from __future__ import annotations

import logging
from typing import Any

import dramatiq

from memjobs_client import contracts
from memjobs_worker.jobs import Actors, declare, parse, report
from memjobs_worker.knowledge.build import KnowledgeParts
from memjobs_worker.knowledge.job import run_reindex
from memjobs_worker.settings import EmbeddingSettings, KnowledgeSettings, WorkerSettings

log = logging.getLogger(__name__)


def declare_knowledge_actors(
    broker: dramatiq.Broker,
    knowledge: KnowledgeSettings,
    embedding: EmbeddingSettings,
    workers: WorkerSettings,
    *,
    rules: contracts.SourceRules,
    lease_ms: int,
    parts: KnowledgeParts,
) -> Actors:
    """Register the knowledge actor on ``parts`` (built when a job first reads them);
    an owner's reindex lock is held under a lease of ``lease_ms``."""

    def reindex_knowledge(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.ReindexKnowledge, args, kwargs, rules)
        report(run_reindex(payload, knowledge=knowledge, embedding=embedding, lease_ms=lease_ms, parts=parts))

    return declare(
        broker,
        workers,
        [
            (contracts.ACTOR_REINDEX, reindex_knowledge, {"time_limit": knowledge.reindex_time_limit_ms}),
        ],
    )
