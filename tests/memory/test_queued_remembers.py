"""Every way a remember leaves the queue, and what becomes of its queued count
(:mod:`memjobs_client.queued`, :mod:`memjobs_worker.memory.queued`): the count
cannot outlive its message for longer than its TTL, and while the remember may
still be taken into the ledger, a forget of it is honoured."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from dramatiq import Message

from memjobs_client import BackendUnavailable, ForgetOutcome
from memjobs_client import queued as producer_side
from memjobs_client.contracts import ACTOR_REMEMBER, QUEUE_REMEMBER, owner_key, source_id_for
from memjobs_worker.memory import queued
from memjobs_worker.ops.deadletters import DeadLetters
from memjobs_worker.runtime import open_door
from memjobs_worker.settings import Settings
from tests.support.harness import Harness
from tests.support.polling import wait_for

OWNER = "grace@example.com"
KEY = owner_key(OWNER)


def count_key_ttl_s(client: redis.Redis, source_id: str) -> int:
    return int(client.ttl(f"memjobs:queued:remember:{KEY}:{source_id}"))


def test_a_remember_is_counted_under_the_owner_key_with_a_ttl_until_the_ledger_has_it(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    h = harness_factory(make_settings())
    sid = h.client.remember(OWNER, "the ladder is in the garage")
    r = h.runtime.redis
    assert queued.holds(r, KEY, sid)
    assert 0 < count_key_ttl_s(r, sid) <= producer_side.QUEUED_REMEMBER_TTL_S
    assert not any(OWNER.encode() in name for name in r.keys("*"))  # sha256(owner), never the id

    h.start_worker()
    h.drain()

    assert h.store.source_state(KEY, sid) == "learned"
    wait_for(lambda: not queued.holds(r, KEY, sid), 10, "the count settled (batched, every 100 ms)")
    assert r.keys(f"memjobs:queued:remember:{KEY}:*") == []


def test_a_remember_refused_as_sensitive_by_the_worker_gives_its_count_back(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    """Written into Redis past the producer's check (counted by hand here), then
    refused and acknowledged by the worker: nothing of it may stay."""
    h = harness_factory(make_settings())
    secret = "stripe secret sk_live_B4r6bSr0pFBOPCWBRDFOxEzf for the shop"
    sid = source_id_for(KEY, secret)
    producer_side.record(h.broker.client, KEY, sid)
    h.broker.enqueue(
        Message(
            queue_name=QUEUE_REMEMBER,
            actor_name=ACTOR_REMEMBER,
            kwargs={},
            options={},
            args=({"schema_version": 1, "owner_key": KEY, "source_id": sid, "text": secret, "kind": "utterance"},),
        )
    )
    h.start_worker()
    h.drain()

    assert h.store.source_state(KEY, sid) is None
    wait_for(lambda: not queued.holds(h.runtime.redis, KEY, sid), 10, "the count settled")


def test_the_counts_of_the_last_jobs_are_settled_when_the_worker_stops(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    """Batched, but not left behind: the worker's stop deletes what its last jobs settled."""
    h = harness_factory(make_settings())
    ids = [h.client.remember(OWNER, f"the shed key is on hook {i}") for i in range(3)]
    settler = next(m for m in h.broker.middleware if isinstance(m, queued.SettleQueuedRemembers))
    settler.flush_ms = 3_600_000  # no flush on the clock: only the stop's
    h.start_worker()
    wait_for(lambda: all(h.store.source_state(KEY, sid) for sid in ids), 30, "the remembers in the ledger")
    h.stop_worker()

    assert [sid for sid in ids if queued.holds(h.runtime.redis, KEY, sid)] == []


def test_a_dead_lettered_remember_stays_counted_and_a_forget_of_it_outlasts_its_retry(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    """Dead-lettered (the worker had memory off), an operator may retry it: until
    then a forget is ``forgotten``, and the retried remember finds it so."""
    settings = make_settings()
    producer = harness_factory(settings)
    sid = producer.client.remember(OWNER, "my niece's birthday is in May")
    off = harness_factory(make_settings(memory_provider="off"))
    off.start_worker()
    off.drain()
    off.stop_worker()
    letters = DeadLetters(producer.runtime.redis, producer.broker)
    assert [letter.actor for letter in letters.letters()] == [ACTOR_REMEMBER]
    assert queued.holds(producer.runtime.redis, KEY, sid)

    door = open_door(settings, producer.endpoints)
    try:
        assert door.personal_memory.forget(OWNER, sid) == ForgetOutcome(sid, "forgotten", "queued")
    finally:
        door.close()
        door.client.close()
    assert letters.retry_all() == (1, 0)
    producer.start_worker()
    producer.drain()

    assert producer.store.source_state(KEY, sid) == "forgotten"
    assert producer.pipeline.memories(KEY) == []


def test_a_remember_whose_enqueue_fails_takes_its_count_back(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = harness_factory(make_settings())

    def refuse(*_: Any, **__: Any) -> Any:
        raise redis.ConnectionError("Redis went away mid-call")

    monkeypatch.setattr(h.client.broker, "enqueue", refuse)
    with pytest.raises(BackendUnavailable):
        h.client.remember(OWNER, "the spare tyre is flat")

    sid = source_id_for(KEY, "the spare tyre is flat")
    assert not queued.holds(h.runtime.redis, KEY, sid)
    assert h.runtime.redis.keys(f"memjobs:queued:remember:{KEY}:*") == []
