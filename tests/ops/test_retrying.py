"""The record of retrying jobs the workers keep (issue 30, item 1): a job is in
it while it waits for a retry — counted, or an outage's uncounted one — and
leaves it when it succeeds or is dead-lettered; the record is bounded on write
and pruned by age on read. Real Redis, the production broker and middleware.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import dramatiq
import pytest
import redis

from memjobs_client import keys
from memjobs_client.errors import BackendUnavailable, SensitiveContent
from memjobs_worker.observability.retrying import RetryingJob, RetryingRecord, stale_after_ms
from memjobs_worker.settings import Settings, WorkerSettings
from tests.support.harness import Harness
from tests.support.polling import wait_for

QUEUE = "memjobs_test_flaky"
ACTOR = "flaky_job"


class Flaky:
    """Fails ``failures`` times with ``error``; the call after those waits for
    :attr:`release` (so the test sees the job between a failure and its end),
    then raises ``last`` when given, else succeeds."""

    def __init__(
        self, failures: int, error: Callable[[], Exception], *, last: Callable[[], Exception] | None = None
    ) -> None:
        self.failures, self.error, self.last = failures, error, last
        self.calls = 0
        self.waiting = threading.Event()
        self.release = threading.Event()

    def __call__(self, payload: dict[str, Any]) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error()
        self.waiting.set()
        assert self.release.wait(30)
        if self.last is not None:
            raise self.last()


@pytest.fixture
def harness(make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]) -> Harness:
    return harness_factory(make_settings())


def run(h: Harness, flaky: Flaky, max_retries: int) -> dramatiq.Message[Any]:
    actor = dramatiq.actor(  # type: ignore[call-overload]
        flaky,
        broker=h.broker,
        actor_name=ACTOR,
        queue_name=QUEUE,
        max_retries=max_retries,
        min_backoff=10,
        max_backoff=50,
    )
    message: dramatiq.Message[Any] = actor.send({"n": 1})
    h.start_worker(threads=2)
    return message


def record(h: Harness) -> list[RetryingJob]:
    return RetryingRecord(h.runtime.redis).read(stale_after_ms=stale_after_ms(h.settings.workers)).newest


@pytest.mark.parametrize(
    ("error", "max_retries", "reason"),
    [
        (lambda: RuntimeError("the model said no"), 5, "RuntimeError"),
        # An outage is retried on the time budget, uncounted (max_retries=0): retrying all the same.
        (lambda: BackendUnavailable("the database did not answer"), 0, "backend_unavailable"),
    ],
    ids=["counted", "outage"],
)
def test_a_job_failing_twice_is_in_the_record_while_retrying_and_leaves_it_on_success(
    harness: Harness,
    error: Callable[[], Exception],
    max_retries: int,
    reason: str,
) -> None:
    flaky = Flaky(2, error)
    message = run(harness, flaky, max_retries)
    assert flaky.waiting.wait(30), "the third attempt never came"
    [job] = wait_for(lambda: record(harness), 10, "the retrying job in the record")
    assert (job.message_id, job.actor, job.reason, job.failures) == (message.message_id, ACTOR, reason, 2)
    assert "the model said no" not in str(job) and "database" not in str(job)  # never the message

    flaky.release.set()
    harness.broker.join(QUEUE, timeout=30_000)
    assert flaky.calls == 3
    assert record(harness) == []
    client = harness.runtime.redis
    assert client.zcard(keys.RETRYING) == 0 and client.hlen(keys.RETRYING_JOBS) == 0


def test_a_dead_lettered_job_leaves_the_record(harness: Harness) -> None:
    flaky = Flaky(1, lambda: RuntimeError("broken"), last=lambda: RuntimeError("broken"))
    message = run(harness, flaky, max_retries=1)
    assert flaky.waiting.wait(30)
    [job] = wait_for(lambda: record(harness), 10, "the retrying job in the record")
    assert job.message_id == message.message_id and job.failures == 1

    flaky.release.set()
    harness.broker.join(QUEUE, timeout=30_000)
    client = harness.runtime.redis
    wait_for(lambda: client.zcard(keys.dead_letters(QUEUE)) == 1, 10, "the dead letter")
    assert record(harness) == []
    assert client.zcard(keys.RETRYING) == 0 and client.hlen(keys.RETRYING_JOBS) == 0


def test_a_job_refused_as_sensitive_after_a_retry_leaves_the_record(harness: Harness) -> None:
    flaky = Flaky(1, lambda: RuntimeError("broken"), last=lambda: SensitiveContent("a credential"))
    run(harness, flaky, max_retries=5)
    assert flaky.waiting.wait(30)
    wait_for(lambda: record(harness), 10, "the retrying job in the record")

    flaky.release.set()
    harness.broker.join(QUEUE, timeout=30_000)
    client = harness.runtime.redis
    assert client.zcard(keys.dead_letters(QUEUE)) == 0  # acknowledged, not kept
    assert record(harness) == [] and client.hlen(keys.RETRYING_JOBS) == 0


def test_the_record_is_trimmed_to_its_cap_on_write(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    kept = RetryingRecord(client, cap=3)
    for i in range(5):
        kept.add(f"m{i}", ACTOR, "RuntimeError", 1, failed_ms=1_000 + i)
    found = kept.read(stale_after_ms=10_000, now_ms=2_000)
    assert found.total == 3
    assert [j.message_id for j in found.newest] == ["m4", "m3", "m2"]  # the newest first
    assert client.hlen(keys.RETRYING_JOBS) == 3  # the oldest went from both keys


def test_entries_older_than_the_stale_age_are_pruned_on_read(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    kept = RetryingRecord(client)
    kept.add("left-behind", ACTOR, "RuntimeError", 1, failed_ms=1_000)
    kept.add("fresh", ACTOR, "RuntimeError", 1, failed_ms=50_000)
    found = kept.read(stale_after_ms=10_000, now_ms=55_000)
    assert found.total == 1 and [j.message_id for j in found.newest] == ["fresh"]
    assert client.zcard(keys.RETRYING) == 1 and client.hkeys(keys.RETRYING_JOBS) == [b"fresh"]


def test_the_stale_age_covers_the_longest_backoff_of_either_policy() -> None:
    settings = Settings(workers=WorkerSettings(max_backoff_ms=300_000, outage_max_backoff_ms=5_000))
    assert stale_after_ms(settings.workers) > 300_000 + settings.workers.broker_heartbeat_timeout_ms
    assert stale_after_ms(WorkerSettings(max_backoff_ms=1_000, outage_max_backoff_ms=90_000)) > 90_000
