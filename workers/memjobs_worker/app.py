"""The worker processes' entry module: ``dramatiq memjobs_worker.app``.

Dramatiq imports this module in each worker process; importing it is that
process's start, so this is where the settings are read (once) and everything
is wired. Below this point settings are passed down, not read again (the
metrics endpoint reads only ``PROMETHEUS_MULTIPROC_DIR``, which the Dramatiq
CLI sets for its processes).
"""

from __future__ import annotations

from collections.abc import Set

import dramatiq

from memjobs_client.contracts import QUEUE_EXTRACT, QUEUE_KNOWLEDGE
from memjobs_worker.actors import declare_actors
from memjobs_worker.broker import build_broker
from memjobs_worker.endpoints import resolve_endpoints
from memjobs_worker.logs import configure_logging
from memjobs_worker.runtime import Runtime, producer_client
from memjobs_worker.settings import load_settings
from memjobs_worker.warmup import Warmup

settings = load_settings()
configure_logging(level=settings.logs.level, adopt=True)
endpoints = resolve_endpoints(settings.data_dir, settings.redis, settings.database)
broker = build_broker(
    endpoints.redis_url,
    settings.redis,
    settings.workers,
    serve_metrics=settings.metrics.endpoint,
    knowledge_on=settings.knowledge.enabled,
)
dramatiq.set_broker(broker)
runtime = Runtime(
    settings,
    endpoints,
    producer_client(settings.redis, settings.memory, settings.sessions, settings.knowledge, broker=broker),
)
actors = declare_actors(broker, runtime)


def warm_up(queues: Set[str] | None) -> None:
    """At start-up rather than on the first job: the migrated database; mem0 where
    extractions run; the knowledge tables (a stale full-text index rebuilt) where
    reindexing runs. A process that takes only cheap jobs never loads mem0."""
    runtime.migrate()
    if settings.memory.enabled and (queues is None or QUEUE_EXTRACT in queues):
        runtime.pipeline.engine.warm()
    if settings.knowledge.enabled and (queues is None or QUEUE_KNOWLEDGE in queues):
        runtime.knowledge  # noqa: B018


broker.add_middleware(Warmup(warm_up))
