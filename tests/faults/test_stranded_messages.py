"""A message a worker holds when its Redis connection is lost is not held for ever.

Dramatiq's consumer thread drops its delayed messages on a connection error
while their ids stay in the live worker's unacknowledged set (only a dead
worker's are put back): an extraction waiting out its debounce when Redis
failed over stayed there until the worker restarted (tests/faults/
test_many_hosts.py found it). memjobs' consumer puts them back when it
reconnects (memjobs_worker/broker.py); this drives that with a real worker and
a real Redis restart.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import dramatiq
import pytest

from memjobs_client import keys
from memjobs_worker.broker import MemjobsRedisBroker, build_broker
from memjobs_worker.embedded import EmbeddedRedis
from memjobs_worker.settings import Settings
from tests.support.polling import wait_for

pytestmark = [pytest.mark.fault]

QUEUE = "stranded_probe"
#: Long enough that the message is still waiting in the worker when Redis stops.
DELAY_MS = 8000


class _ConnectionErrors(logging.Handler):
    """Counts the consumer threads' "connection error" reports (Dramatiq's own log)."""

    def __init__(self) -> None:
        super().__init__(logging.CRITICAL)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "connection error" in record.getMessage():
            self.seen.append(record.name)


@pytest.fixture
def broker(make_settings: Callable[..., Settings]) -> Iterator[MemjobsRedisBroker]:
    settings = make_settings()
    assert settings.redis_url
    made = build_broker(settings.redis_url, settings)
    yield made
    made.close()


def test_a_delayed_message_dropped_by_a_lost_connection_runs_once_after_reconnect(
    broker: MemjobsRedisBroker, redis_server: EmbeddedRedis
) -> None:
    ran: list[str] = []
    done = threading.Event()

    @dramatiq.actor(broker=broker, queue_name=QUEUE, max_retries=0)
    def probe(text: str) -> None:
        ran.append(text)
        done.set()

    errors = _ConnectionErrors()
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
