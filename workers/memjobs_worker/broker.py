"""The Dramatiq broker on Redis, with memjobs' middleware."""

from __future__ import annotations

from dramatiq.middleware import CurrentMessage, Retries

from memjobs_client.contracts import NAMESPACE, QUEUES
from memjobs_worker.observability.heartbeat import Heartbeat
from memjobs_worker.observability.jobstats import JobStats
from memjobs_worker.observability.observe import ObserveJobs
from memjobs_worker.observability.server import MetricsEndpoint
from memjobs_worker.redis_broker import MemjobsRedisBroker
from memjobs_worker.runtime import connect_redis
from memjobs_worker.settings import Settings


def build_broker(redis_url: str, settings: Settings) -> MemjobsRedisBroker:
    """A Redis broker in the ``memjobs`` namespace with every queue declared."""
    broker = MemjobsRedisBroker(  # type: ignore[no-untyped-call]
        client=connect_redis(redis_url, settings),  # bounded calls; Sentinel when set
        namespace=NAMESPACE,
        heartbeat_timeout=settings.broker_heartbeat_timeout_ms,
        # Requeue a dead worker's messages promptly (Dramatiq's default is rare):
        # one dispatch in ten checks for dead workers (a ZRANGEBYSCORE).
        maintenance_chance=100_000,
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
