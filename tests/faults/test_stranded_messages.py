"""A message a worker holds when Redis goes away is neither held for ever nor lost.

Dramatiq's consumer thread drops its delayed messages on a connection error
while their ids stay in the live worker's unacknowledged set (only a dead
worker's are put back): an extraction waiting out its debounce when Redis
failed over stayed there until the worker restarted. And a retry that Redis
did not take (a job failed on the outage itself) was dropped while its
delivery was acknowledged once Redis came back: the job was gone.
tests/faults/test_many_hosts.py found both after a Sentinel failover;
memjobs' broker puts the first back and retries the second
(memjobs_worker/broker.py). Driven here with a real worker and real Redis
stops and starts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import dramatiq
import pytest

from memjobs_client import keys
from memjobs_client.errors import BackendUnavailable
from memjobs_worker.broker import MemjobsRedisBroker, build_broker
from memjobs_worker.embedded import EmbeddedRedis
from memjobs_worker.settings import Settings
from tests.support.polling import wait_for

pytestmark = [pytest.mark.fault]

QUEUE = "stranded_probe"
#: Long enough that the message is still waiting in the worker when Redis stops.
DELAY_MS = 8000


class _Reports(logging.Handler):
    """Collects the log records whose message holds ``words`` (their loggers' names)."""

    def __init__(self, words: str, level: int) -> None:
        super().__init__(level)
        self.words = words
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.seen.append(record.name)


@pytest.fixture
def broker(make_settings: Callable[..., Settings]) -> Iterator[MemjobsRedisBroker]:
    settings = make_settings()
    assert settings.redis.url
    made = build_broker(
        settings.redis.url,
        settings.redis,
        settings.workers,
        serve_metrics=settings.metrics.endpoint,
        knowledge_on=settings.knowledge.enabled,
    )
    yield made
    made.close()


def _recording_probe(
    broker: MemjobsRedisBroker, runs: int
) -> tuple[dramatiq.Actor[[str], None], list[str], threading.Event]:
    """An actor on :data:`QUEUE` (no retries) that records each text it runs: the
    actor, the texts it ran, and an event set once it has run ``runs`` times."""
    ran: list[str] = []
    done = threading.Event()

    @dramatiq.actor(broker=broker, queue_name=QUEUE, max_retries=0)
    def probe(text: str) -> None:
        ran.append(text)
        if len(ran) == runs:
            done.set()

    return probe, ran, done


def test_a_delayed_message_dropped_by_a_lost_connection_runs_once_after_reconnect(
    broker: MemjobsRedisBroker, redis_server: EmbeddedRedis
) -> None:
    probe, ran, done = _recording_probe(broker, runs=1)

    errors = _Reports("connection error", logging.CRITICAL)  # Dramatiq's consumer threads say so
    logging.getLogger("dramatiq").addHandler(errors)
    worker = dramatiq.Worker(broker, worker_threads=1, worker_timeout=50)
    worker.start()
    delayed_acks = keys.acks(broker.broker_id, f"{QUEUE}.DQ")
    try:
        probe.send_with_options(args=("once",), delay=DELAY_MS)
        wait_for(lambda: broker.client.scard(delayed_acks) == 1, 30, "the worker to hold the delayed message")
        redis_server.stop()
        try:
            wait_for(lambda: any(f"{QUEUE}.DQ" in name for name in errors.seen), 60, "the consumer to lose Redis")
            assert not ran, "the message ran before Redis stopped: the machine was too slow for this test's delay"
        finally:
            redis_server.start()
        assert done.wait(DELAY_MS / 1000 + 60), "the delayed message never ran after Redis came back"
        wait_for(
            lambda: broker.client.scard(delayed_acks) == 0 and broker.client.llen(f"{keys.NAMESPACE}:{QUEUE}") == 0,
            30,
            "the message to be acknowledged",
        )
        wait_for(lambda: worker.work_queue.unfinished_tasks == 0, 30, "the worker to finish")
        # Nothing left that could run it again: not in either queue, nor unacknowledged.
        assert broker.client.llen(f"{keys.NAMESPACE}:{QUEUE}.DQ") == 0
        assert broker.client.hlen(f"{keys.NAMESPACE}:{QUEUE}.DQ.msgs") == 0
        assert ran == ["once"]
    finally:
        worker.stop()
        logging.getLogger("dramatiq").removeHandler(errors)


def test_a_retry_redis_did_not_take_is_queued_once_redis_is_back(
    broker: MemjobsRedisBroker, redis_server: EmbeddedRedis
) -> None:
    calls: list[int] = []
    again = threading.Event()

    @dramatiq.actor(broker=broker, queue_name=QUEUE, min_backoff=10, max_backoff=100)
    def outage_probe() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            redis_server.stop()  # the outage begins while the job runs: its retry meets it
            raise BackendUnavailable("Redis went away mid-job")
        again.set()

    refused = _Reports("a retry could not be queued", logging.WARNING)  # memjobs' broker, trying again
    dropped = _Reports("Unexpected failure in after_process_message", logging.CRITICAL)  # Dramatiq, giving up
    logging.getLogger("memjobs_worker.broker").addHandler(refused)
    logging.getLogger("dramatiq").addHandler(dropped)
    worker = dramatiq.Worker(broker, worker_threads=1, worker_timeout=50)
    worker.start()
    try:
        outage_probe.send()
        try:
            wait_for(lambda: refused.seen or dropped.seen, 60, "the worker to find Redis gone when it queues the retry")
        finally:
            if redis_server.process is None or redis_server.process.poll() is not None:
                redis_server.start()
        assert again.wait(60), "the retry was lost: the job never ran again"
        wait_for(lambda: worker.work_queue.unfinished_tasks == 0, 30, "the worker to finish")
        assert calls == [0, 1]
        assert not dropped.seen
        for queue in (QUEUE, f"{QUEUE}.DQ"):
            assert broker.client.llen(f"{keys.NAMESPACE}:{queue}") == 0
            assert broker.client.scard(keys.acks(broker.broker_id, queue)) == 0
    finally:
        worker.stop()
        logging.getLogger("memjobs_worker.broker").removeHandler(refused)
        logging.getLogger("dramatiq").removeHandler(dropped)


class _StopRedisOnMove(dramatiq.Middleware):
    """Stops Redis the first time a delayed message is moved to its queue: the
    consumer thread's move then fails, and its close puts back what it held
    with Redis still down."""

    def __init__(self, server: EmbeddedRedis) -> None:
        self.server = server
        self.cut = False
        self.stopped = threading.Event()

    def before_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        if message.queue_name == QUEUE and "redis_message_id" in message.options and not self.cut:
            self.cut = True
            self.server.stop()
            self.stopped.set()


def test_the_consumer_thread_survives_redis_going_away_as_it_moves_a_delayed_message(
    broker: MemjobsRedisBroker, redis_server: EmbeddedRedis
) -> None:
    moved_probe, ran, done = _recording_probe(broker, runs=2)  # the later message and the first

    cut = _StopRedisOnMove(redis_server)
    broker.add_middleware(cut)
    restarts = _Reports("Restarting consumer", logging.INFO)  # logged once the thread's close returned
    dramatiq_worker_log = logging.getLogger("dramatiq.worker")
    level = dramatiq_worker_log.level
    dramatiq_worker_log.setLevel(logging.INFO)
    dramatiq_worker_log.addHandler(restarts)
    worker = dramatiq.Worker(broker, worker_threads=1, worker_timeout=50)
    worker.start()
    consumer = worker.consumers[f"{QUEUE}.DQ"]
    try:
        # The later one is still in the consumer thread's delay queue when the
        # first one's move fails: its close tries to put it back, Redis down.
        later = keys.acks(broker.broker_id, f"{QUEUE}.DQ")
        moved_probe.send_with_options(args=("later",), delay=4000)
        moved_probe.send_with_options(args=("first",), delay=500)
        wait_for(lambda: broker.client.scard(later) == 2, 30, "the worker to hold both delayed messages")
        try:
            assert cut.stopped.wait(60), "the delayed message never came due"
            # Redis stays down until the consumer thread has closed (or died trying).
            wait_for(
                lambda: f"{QUEUE}.DQ" in " ".join(restarts.seen) or not consumer.is_alive(),
                60,
                "the consumer thread to close its consumer",
            )
        finally:
            redis_server.start()
        assert consumer.is_alive(), "the consumer thread died closing its consumer with Redis down"
        assert done.wait(60), f"the delayed messages never ran (ran: {ran})"
        wait_for(lambda: worker.work_queue.unfinished_tasks == 0, 30, "the worker to finish")
        assert sorted(ran) == ["first", "later"]
    finally:
        worker.stop()
        dramatiq_worker_log.removeHandler(restarts)
        dramatiq_worker_log.setLevel(level)


def test_a_consumer_closing_puts_back_what_it_prefetched_and_did_not_hand_out(broker: MemjobsRedisBroker) -> None:
    # A graceful stop closes each consumer: what it fetched ahead (prefetch) and
    # never handed to a worker thread goes back onto the queue at once, instead of
    # staying unacknowledged until this worker's heartbeat expires.
    @dramatiq.actor(broker=broker, queue_name=QUEUE, max_retries=0)
    def probe(text: str) -> None:
        pass

    for i in range(5):
        probe.send(f"queued {i}")
    acks = keys.acks(broker.broker_id, QUEUE)
    consumer = broker.consume(QUEUE, prefetch=5, timeout=100)
    first = next(consumer)
    assert first is not None
    assert broker.client.scard(acks) == 5  # all five fetched: one handed out, four ahead
    consumer.requeue([first])  # the worker's own shutdown puts back what it was handed
    consumer.close()
    assert broker.client.scard(acks) == 0
    assert broker.client.llen(keys.queue(QUEUE)) == 5
