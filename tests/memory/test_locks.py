"""The fenced learning lock on real Redis, and the ledger's fencing check."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import redis

from memjobs_client.contracts import RememberSource, owner_key, source_id_for
from memjobs_client.errors import LockLost, StaleFencingToken
from memjobs_worker.embedded.process import free_port
from memjobs_worker.lease import LeaseLock
from memjobs_worker.memory.intake import sweep
from memjobs_worker.memory.store.sql import SqlStateStore
from memjobs_worker.settings import Settings
from tests.support.harness import Harness

KEY = owner_key("bob")


@pytest.fixture
def client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def lock(client: redis.Redis, events: list[str] | None = None) -> LeaseLock:
    sink = events.append if events is not None else (lambda _: None)
    return LeaseLock(client, "learn", KEY, lease_ms=5000, on_event=sink)


def test_fencing_tokens_increase_with_each_acquisition(client: redis.Redis) -> None:
    first = lock(client)
    token1 = first.try_acquire()
    assert first.release() == "released"
    second = lock(client)
    token2 = second.try_acquire()
    assert token1 is not None and token2 is not None and token2 > token1


def test_second_holder_fails_fast_and_marks_the_owner_dirty(client: redis.Redis) -> None:
    events: list[str] = []
    holder, other = lock(client, events), lock(client, events)
    assert holder.try_acquire() is not None
    assert other.try_acquire() is None
    assert events == ["acquired", "busy"]
    assert client.exists(holder.dirty_key) == 1


def test_release_loops_again_when_work_arrived_meanwhile(client: redis.Redis) -> None:
    holder, other = lock(client), lock(client)
    holder.try_acquire()
    other.try_acquire()  # busy: sets the dirty flag
    assert holder.release() == "again"  # the wake-up is not lost
    assert client.get(holder.lock_key) == holder.value.encode()  # still held
    assert holder.release() == "released"
    assert client.exists(holder.lock_key) == 0


def test_a_lease_taken_over_is_lost_and_stops_the_commit(client: redis.Redis) -> None:
    events: list[str] = []
    holder = lock(client, events)
    holder.try_acquire()
    client.delete(holder.lock_key)  # the lease expired
    usurper = lock(client)
    assert usurper.try_acquire() is not None
    with pytest.raises(LockLost):
        holder.ensure_held()
    assert "lost" in events
    assert holder.release() == "lost"
    assert client.get(usurper.lock_key) == usurper.value.encode()  # untouched


def test_a_holder_cut_off_from_redis_commits_on_the_fence_but_starts_nothing_after_a_lease(
    client: redis.Redis,
) -> None:
    events: list[str] = []
    holder = LeaseLock(client, "learn", KEY, lease_ms=300, on_event=events.append)
    assert holder.try_acquire() is not None
    assert not holder.expired()
    # Redis stops answering this holder (its connections go to a closed port).
    client.connection_pool.reset()
    client.connection_pool.connection_kwargs["port"] = free_port()
    holder.ensure_held()  # cannot tell: the fence in the ledger decides the commit
    assert holder.unreachable and events[-1] == "unverified"
    deadline = time.monotonic() + 5
    while not holder.expired():  # a whole lease without a confirmed renewal
        assert time.monotonic() < deadline, "the lease never counted as run out"
        time.sleep(0.02)
    assert not holder.lost.is_set()  # not known lost: only no longer to be used


def test_the_store_refuses_a_stale_holders_commit(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(make_settings())
    text = "I keep the spare key under the blue pot"
    h.store.add_source(
        RememberSource(owner_key=KEY, source_id=source_id_for(KEY, text), text=text),
        sent_at=datetime.now(UTC),
    )
    stale = h.store.begin_attempt(KEY, 1, 10)
    assert stale is not None
    newer = h.store.begin_attempt(KEY, 2, 10)  # a newer holder was seen
    assert newer is not None
    with pytest.raises(StaleFencingToken):
        h.store.commit_attempt(stale, [])
    assert [r.state for r in h.store.list_sources(KEY)] == ["pending"]
    h.store.commit_attempt(newer, [])
    assert [r.state for r in h.store.list_sources(KEY)] == ["learned"]


def test_sweeper_requeues_only_owners_pending_past_the_threshold(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(make_settings(extract_delay_ms=0))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    store = SqlStateStore(h.store.engine, clock=lambda: t0)
    text = "remind me about the dentist"
    store.add_source(RememberSource(owner_key=KEY, source_id=source_id_for(KEY, text), text=text),
                     sent_at=t0)
    threshold_ms = 60_000
    assert sweep(store, h.runtime.scheduler, t0 + timedelta(seconds=59), threshold_ms) == 0
    assert h.queues()["memjobs_extract"]["ready"] == 0
    assert sweep(store, h.runtime.scheduler, t0 + timedelta(seconds=61), threshold_ms) == 1
    assert h.queues()["memjobs_extract"]["ready"] == 1
