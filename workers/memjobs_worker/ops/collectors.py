"""Prometheus collectors that read state at scrape time: queue depths and ages
from Redis, live worker heartbeats, the model services' circuit breakers,
ledger sources by state."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import redis
from dramatiq import Message
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from memjobs_client import keys
from memjobs_client.contracts import QUEUES
from memjobs_client.errors import MemjobsError
from memjobs_client.redis_seam import as_bytes, redis_errors
from memjobs_worker.memory.store.base import StateStore
from memjobs_worker.observability.heartbeat import live_heartbeats
from memjobs_worker.observability.metrics import DEAD_LETTERS_PURGED, DEAD_LETTERS_RETRIED
from memjobs_worker.ops import status as ops
from memjobs_worker.ops.deadletters import DeadLetters

log = logging.getLogger(__name__)


def oldest_ready_age_s(client: redis.Redis, queue: str, now: float | None = None) -> float:
    """Age of the message at the head of a queue (Dramatiq RPUSHes and LPOPs), 0 if empty."""
    head = client.lindex(keys.queue(queue), 0)
    if head is None:
        return 0.0
    data = client.hget(keys.messages(queue), head)
    if data is None:
        return 0.0
    try:
        message = Message.decode(as_bytes(data))
    except Exception:  # noqa: BLE001 - a crafted message must not break the scrape
        return 0.0
    ready_ms = max(message.message_timestamp, int(message.options.get("eta", 0)))
    return max(0.0, (now if now is not None else time.time()) - ready_ms / 1000)


class QueueCollector(Collector):
    """Queue depth (ready, delayed, in flight, dead), oldest age, live workers, the
    model circuit breakers, and the dead letters operators retried and purged (counters kept in Redis)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        depth = GaugeMetricFamily("memjobs_queue_messages", "Messages in a queue, by state.", labels=["queue", "state"])
        age = GaugeMetricFamily(
            "memjobs_queue_oldest_age_seconds", "Age of the oldest ready message in a queue.", labels=["queue"]
        )
        workers = GaugeMetricFamily("memjobs_workers_alive", "Worker processes with a live heartbeat.")
        breaker = GaugeMetricFamily(
            "memjobs_model_circuit_open",
            "1 while a model service's circuit breaker is open (model work waits).",
            labels=["service"],
        )
        up = GaugeMetricFamily("memjobs_redis_up", "1 when Redis answered this scrape.")
        try:
            with redis_errors():
                stats = ops.queue_stats(self.client)
                for queue in QUEUES:
                    for state in ("ready", "delayed", "in_flight", "dead"):
                        depth.add_metric([queue, state], stats[queue][state])
                    age.add_metric([queue], oldest_ready_age_s(self.client, queue))
                workers.add_metric([], len(live_heartbeats(self.client)))
                for model in ops.model_breakers(self.client):
                    breaker.add_metric([model.service], 1 if model.is_open else 0)
                actions: list[CounterMetricFamily] = []
                totals = DeadLetters(self.client).totals()
                for (name, help_text), action in ((DEAD_LETTERS_RETRIED, "retried"), (DEAD_LETTERS_PURGED, "purged")):
                    counter = CounterMetricFamily(name, help_text, labels=["queue"])
                    for queue in QUEUES:
                        counter.add_metric([queue], totals[action].get(queue, 0))
                    actions.append(counter)
                up.add_metric([], 1)
        except MemjobsError:  # Redis did not answer (BackendUnavailable)
            up.add_metric([], 0)
            yield up
            return
        yield from (depth, age, workers, breaker, up)
        yield from actions


class LedgerCollector(Collector):
    """Sources by state, read from the state store at scrape time."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        sources = GaugeMetricFamily("memjobs_ledger_sources", "Sources in the ledger, by state.", labels=["state"])
        oldest = GaugeMetricFamily(
            "memjobs_ledger_oldest_pending_age_seconds",
            "How long the longest-waiting pending source has waited (0: none).",
        )
        up = GaugeMetricFamily("memjobs_state_store_up", "1 when the state store answered this scrape.")
        try:
            for state, n in self.store.counts_by_state().items():
                sources.add_metric([state], n)
            since = self.store.oldest_pending_at()
            oldest.add_metric([], 0.0 if since is None else max(0.0, time.time() - since.timestamp()))
        except MemjobsError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield from (sources, oldest, up)
