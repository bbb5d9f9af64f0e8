"""The Dramatiq broker on Redis, with memjobs' middleware and every queue declared.

Dramatiq's Redis consumer raises on a message it cannot decode (bytes pushed
into a queue by hand, a foreign encoder): the consumer thread restarts, and the
messages it had prefetched stay unacknowledged until the worker dies. Here such
a message is found among this consumer's unacknowledged ids and moved to the
dead-letter queue, once, and consumption goes on.
"""

from __future__ import annotations

import logging
from typing import Any

from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.errors import DecodeError
from dramatiq.middleware import CurrentMessage, Retries

from memjobs_client import keys
from memjobs_client.contracts import QUEUES
from memjobs_worker.observability.failures import RecordFailures
from memjobs_worker.observability.heartbeat import Heartbeat
from memjobs_worker.observability.jobstats import JobStats
from memjobs_worker.observability.observe import ObserveJobs
from memjobs_worker.ops.server import MetricsEndpoint
from memjobs_worker.refusals import RefuseSensitive
from memjobs_worker.runtime import connect_redis
from memjobs_worker.settings import Settings

log = logging.getLogger(__name__)


class _Consumer(_RedisConsumer):
    def __next__(self) -> Any:
        while True:
            try:
                return super().__next__()  # type: ignore[no-untyped-call]
            except DecodeError as exc:
                self._dead_letter(exc.data)

    def _dead_letter(self, data: bytes) -> None:
        broker = self.broker
        acks = keys.acks(broker.broker_id, self.queue_name)
        messages = keys.messages(self.queue_name)
        for raw_id in broker.client.smembers(acks):
            if broker.client.hget(messages, raw_id) == data:
                message_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
                broker.do_nack(self.queue_name, message_id)
                log.warning("undecodable message dead-lettered",
                            extra={"queue": self.queue_name, "reason": "undecodable_message"})
                return
        log.warning("undecodable message dropped: not found among this consumer's messages",
                    extra={"queue": self.queue_name, "reason": "undecodable_message"})


class MemjobsRedisBroker(RedisBroker):
    """A RedisBroker whose consumers dead-letter what they cannot decode."""

    @property
    def consumer_class(self) -> type[_RedisConsumer]:
        return _Consumer


def build_broker(redis_url: str, settings: Settings) -> MemjobsRedisBroker:
    """A Redis broker in the ``memjobs`` namespace with every queue declared."""
    broker = MemjobsRedisBroker(  # type: ignore[no-untyped-call]
        client=connect_redis(redis_url, settings),  # bounded calls; Sentinel when set
        namespace=keys.NAMESPACE,
        heartbeat_timeout=settings.broker_heartbeat_timeout_ms,
        # Requeue a dead worker's messages promptly (Dramatiq's default is rare):
        # one dispatch in ten checks for dead workers (a ZRANGEBYSCORE).
        maintenance_chance=100_000,
    )
    broker.add_middleware(CurrentMessage())
    # Before Retries in the list: "after" hooks run in reverse, so Retries has
    # already decided retry or dead-letter when ObserveJobs records the outcome.
    broker.add_middleware(ObserveJobs(JobStats(broker.client)), before=Retries)
    broker.add_middleware(RefuseSensitive(), before=Retries)  # between the two: see refusals.py
    broker.add_middleware(RecordFailures(broker.client))  # after Retries: see failures.py
    broker.add_middleware(Heartbeat(broker.client, interval_ms=settings.heartbeat_interval_ms,
                                    ttl_ms=settings.heartbeat_ttl_ms))
    broker.add_middleware(MetricsEndpoint(settings.metrics_endpoint))
    for queue in QUEUES:
        broker.declare_queue(queue)
    return broker
