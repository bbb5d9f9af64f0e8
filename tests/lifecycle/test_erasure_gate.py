"""The workers' erasure check reads the markers once a period, not once per job,
and an erasure waits out that period before it looks for the owner's jobs."""

from __future__ import annotations

import time

import redis

from memjobs_client import keys
from memjobs_client.contracts import owner_key
from memjobs_worker.erased import ErasureGate, hold, settle
from tests.support.redis_commands import commands_of
from tests.support.redis_values import as_bytes

ALICE = owner_key("alice@example.com")
BOB = owner_key("bob@example.com")


def test_many_jobs_cost_one_read_of_the_erasures(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    hold(client, ALICE, 60_000)
    gate = ErasureGate(client, poll_ms=600_000)
    answers: list[bool] = []

    sent = commands_of(client, lambda: answers.extend(gate.erasing(ALICE if i % 2 else BOB) for i in range(200)))

    assert answers == [bool(i % 2) for i in range(200)]
    assert sent == {"zrangebyscore": 1}
    assert client.exists(keys.owner_erased(ALICE))  # the marker itself, as before


def test_a_job_checked_after_the_settle_sees_an_erasure_its_process_had_not_read(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    stale = ErasureGate(client, poll_ms=600_000)
    polled = ErasureGate(client, poll_ms=200)
    assert not stale.erasing(ALICE) and not polled.erasing(ALICE)  # both read before the erasure

    hold(client, ALICE, 60_000)
    held_at = time.monotonic()
    settle(held_at, poll_ms=200)

    assert time.monotonic() - held_at >= 0.2
    assert polled.erasing(ALICE)  # its read is older than its period: read again
    assert not stale.erasing(ALICE)  # what the period is for: trusted until it ends


def test_expired_erasures_leave_the_list(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.zadd(keys.ERASING, {keys.owner_erased(BOB): int(time.time() * 1000) - 1})

    hold(client, ALICE, 60_000)

    assert [as_bytes(m).decode() for m in client.zrange(keys.ERASING, 0, -1)] == [keys.owner_erased(ALICE)]
    assert not ErasureGate(client).erasing(BOB)
