"""A queue a producer waits on is looked at soon after a quiet spell.

Dramatiq's idle consumer backs off exponentially between looks at an empty
queue, up to its worker's timeout (1 s): the first remember after a quiet spell
reached the ledger up to a second late (docs/benchmarks.md, "A remember after a
quiet spell"). The cheap queues' consumers back off to ``fast_worker_poll_ms``
at most; their delay queues and the model jobs' queues keep Dramatiq's second.

Real parts: the session's Redis and memjobs' broker as workers build it; the
consumer's sleep is read where Dramatiq's Redis consumer takes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from dramatiq.brokers import redis as dramatiq_redis
from dramatiq.common import dq_name

from memjobs_client.contracts import QUEUE_EXTRACT, QUEUE_REMEMBER
from memjobs_worker.broker import MemjobsRedisBroker, build_broker
from memjobs_worker.settings import Settings

#: The worker's timeout, as Dramatiq's command line gives it.
WORKER_TIMEOUT_MS = 1000


@pytest.fixture
def broker(make_settings: Callable[..., Settings]) -> Iterator[MemjobsRedisBroker]:
    settings = make_settings(fast_worker_poll_ms=50)
    assert settings.redis.url
    made = build_broker(settings.redis.url, settings.redis, settings.workers, serve_metrics=False, knowledge_on=False)
    yield made
    made.close()


class _Sleeps:
    """Stands in for the ``time`` module of Dramatiq's Redis consumer: records each sleep."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.asked.append(seconds)


@pytest.mark.parametrize(
    ("queue", "longest_s"),
    [
        (QUEUE_REMEMBER, 0.05),  # a producer waits on it
        (dq_name(QUEUE_REMEMBER), WORKER_TIMEOUT_MS / 1000),  # delayed messages: not waited on
        (QUEUE_EXTRACT, WORKER_TIMEOUT_MS / 1000),  # waits on the model far longer
    ],
)
def test_an_idle_consumer_sleeps_at_most_its_queues_poll(
    broker: MemjobsRedisBroker, monkeypatch: pytest.MonkeyPatch, queue: str, longest_s: float
) -> None:
    sleeps = _Sleeps()
    monkeypatch.setattr(dramatiq_redis, "time", sleeps)
    consumer = broker.consume(queue, prefetch=1, timeout=WORKER_TIMEOUT_MS)
    try:
        consumer.misses = 20  # type: ignore[attr-defined]  # a long quiet spell: Dramatiq's backoff is at its cap
        for _ in range(5):  # the queue is empty: each look ends in a sleep
            assert next(consumer) is None
    finally:
        consumer.close()
    assert len(sleeps.asked) == 5
    # Dramatiq sleeps between half its cap and the cap (jitter).
    assert all(longest_s / 2 <= s <= longest_s for s in sleeps.asked), sleeps.asked
