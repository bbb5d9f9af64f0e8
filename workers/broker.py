"""The Dramatiq broker on Redis, with memjobs' middleware."""

from __future__ import annotations

from dramatiq.middleware import CurrentMessage, Retries

from producers.contracts import NAMESPACE, QUEUES
from workers.jobstats import JobStats
from workers.metrics_server import MetricsEndpoint
from workers.middleware.heartbeat import Heartbeat
from workers.middleware.observe import ObserveJobs
from workers.redis_broker import MemjobsRedisBroker
from workers.settings import Settings


def build_broker(redis_url: str, settings: Settings) -> MemjobsRedisBroker:
    """A Redis broker in the ``memjobs`` namespace with every queue declared."""
    broker = MemjobsRedisBroker(  # type: ignore[no-untyped-call]
        url=redis_url,
        namespace=NAMESPACE,
        heartbeat_timeout=settings.broker_heartbeat_timeout_ms,
        # Requeue a dead worker's messages promptly (Dramatiq's default is rare).
        maintenance_chance=10_000,
        socket_timeout=10,
        socket_connect_timeout=5,
    )
    broker.add_middleware(CurrentMessage())
    # Before Retries in the list: "after" hooks run in reverse, so Retries has
    # already decided retry or dead-letter when ObserveJobs records the outcome.
    broker.add_middleware(ObserveJobs(JobStats(broker.client)), before=Retries)
    broker.add_middleware(Heartbeat(broker.client, interval_ms=settings.heartbeat_interval_ms,
                                    ttl_ms=settings.heartbeat_ttl_ms))
    broker.add_middleware(MetricsEndpoint())
    for queue in QUEUES:
        broker.declare_queue(queue)
    return broker
