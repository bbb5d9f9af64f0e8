"""The debounced scheduling of an owner's extraction: one message per burst,
and one Redis round trip per burst rather than one per source, without a
source ever left for the sweeper.

Time is injected (the scheduler's monotonic clock, the ledger's clock): nothing
sleeps. The messages are kept by the test, which delivers them itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from memjobs_client import keys
from memjobs_client.contracts import ExtractFacts, RememberSource, owner_key, source_id_for
from memjobs_worker.memory.engine import InMemoryEngine
from memjobs_worker.memory.intake import ExtractionScheduler
from memjobs_worker.memory.pipeline import MemoryPipeline
from memjobs_worker.memory.store import InMemoryStateStore

KEY = owner_key("scheduled@example.com")
DELAY_MS = 500


class Clocks:
    """The ledger's wall clock and the scheduler's monotonic one, moved together."""

    def __init__(self) -> None:
        self.wall = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
        self.seconds = 1000.0

    def now(self) -> datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.seconds

    def advance(self, ms: int) -> None:
        self.wall += timedelta(milliseconds=ms)
        self.seconds += ms / 1000


class Rig:
    def __init__(self, client: redis.Redis, *, delay_ms: int = DELAY_MS) -> None:
        self.clocks = Clocks()
        self.redis = client
        self.sent: list[tuple[dict[str, Any], int | None]] = []
        self.store = InMemoryStateStore(clock=self.clocks.now)
        self.scheduler = ExtractionScheduler(client, self._enqueue, lease_ms=30_000, delay_ms=delay_ms,
                                             monotonic=self.clocks.monotonic)
        self.pipeline = MemoryPipeline(store=self.store, engine=InMemoryEngine(), redis_client=client,
                                       scheduler=self.scheduler, batch_size=10, lease_ms=30_000,
                                       max_wait_ms=5_000)
        self.count = 0

    def _enqueue(self, actor: str, payload: dict[str, Any], delay_ms: int | None) -> None:
        self.sent.append((payload, delay_ms))

    def remember(self) -> str:
        text = f"note number {self.count} about the orchard"
        self.count += 1
        sid = source_id_for(KEY, text)
        self.pipeline.remember(RememberSource(owner_key=KEY, source_id=sid, text=text),
                               sent_at=self.clocks.now())
        return sid

    def deliver(self, payload: dict[str, Any]) -> str:
        return self.pipeline.extract(ExtractFacts.model_validate(payload)).outcome

    def flag_set(self) -> bool:
        return bool(self.redis.exists(keys.extraction_scheduled(KEY)))

    def states(self) -> set[str]:
        return {r.state for r in self.store.list_sources(KEY)}


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url)
    connection.delete(keys.extraction_scheduled(KEY), keys.lock("learn", KEY), keys.lock_dirty("learn", KEY))
    yield connection
    connection.close()


def test_a_burst_within_half_the_delay_sets_the_flag_once(client: redis.Redis) -> None:
    rig = Rig(client)
    rig.remember()
    assert rig.flag_set() and len(rig.sent) == 1
    # The flag gone (as when an extraction starts): a source that went to Redis
    # would set it again; one within half the delay of our own message does not.
    client.delete(keys.extraction_scheduled(KEY))
    rig.clocks.advance(DELAY_MS // 2 - 1)
    rig.remember()
    assert not rig.flag_set() and len(rig.sent) == 1


def test_after_half_the_delay_a_source_asks_redis_again(client: redis.Redis) -> None:
    rig = Rig(client)
    rig.remember()
    client.delete(keys.extraction_scheduled(KEY))
    rig.clocks.advance(DELAY_MS // 2)
    rig.remember()
    assert rig.flag_set() and len(rig.sent) == 2


def test_a_source_that_skipped_the_flag_is_learned_by_the_message_in_its_delay(client: redis.Redis) -> None:
    rig = Rig(client)
    first = rig.remember()
    [(message, delay_ms)] = rig.sent
    assert delay_ms == DELAY_MS
    # Another trigger runs the owner's extraction meanwhile: it clears the flag
    # and learns the first source.
    assert rig.pipeline.extract(ExtractFacts(owner_key=KEY, trigger="sweep")).outcome == "done"
    assert {r.source_id: r.state for r in rig.store.list_sources(KEY)} == {first: "learned"}
    rig.clocks.advance(100)
    rig.remember()  # within half the delay: no flag, no message
    assert not rig.flag_set() and len(rig.sent) == 1
    # The first message, delivered after its delay, finds the second source.
    rig.clocks.advance(DELAY_MS)
    assert rig.deliver(message) == "done"
    assert rig.states() == {"learned"}


def test_a_deferred_message_also_spares_the_flag_for_half_its_delay(client: redis.Redis) -> None:
    rig = Rig(client)
    rig.remember()
    rig.clocks.advance(100)
    assert rig.deliver(rig.sent.pop()[0]) == "deferred"  # the owner is still talking
    [(message, delay_ms)] = rig.sent
    assert delay_ms == DELAY_MS - 100
    client.delete(keys.extraction_scheduled(KEY))
    rig.clocks.advance((DELAY_MS - 100) // 2 - 1)
    rig.remember()
    assert not rig.flag_set() and len(rig.sent) == 1
    rig.clocks.advance(DELAY_MS)
    assert rig.deliver(message) == "done"
    assert rig.states() == {"learned"}


def test_the_half_delay_counts_from_the_send_not_from_its_return(client: redis.Redis) -> None:
    rig = Rig(client)
    slow = rig.scheduler.enqueue

    def enqueue_slowly(actor: str, payload: dict[str, Any], delay_ms: int | None) -> None:
        rig.clocks.advance(DELAY_MS // 2)  # a Redis that took its time to answer
        slow(actor, payload, delay_ms)

    rig.scheduler.enqueue = enqueue_slowly
    rig.remember()
    client.delete(keys.extraction_scheduled(KEY))
    rig.remember()
    assert rig.flag_set() and len(rig.sent) == 2


def test_force_always_goes_to_redis_and_sends(client: redis.Redis) -> None:
    rig = Rig(client)
    rig.remember()
    client.delete(keys.extraction_scheduled(KEY))
    assert rig.scheduler.schedule(KEY, "forget", force=True)
    assert rig.flag_set() and len(rig.sent) == 2


def test_without_a_delay_every_source_asks_redis(client: redis.Redis) -> None:
    rig = Rig(client, delay_ms=0)
    rig.remember()
    client.delete(keys.extraction_scheduled(KEY))
    rig.remember()
    assert rig.flag_set() and [d for _, d in rig.sent] == [None, None]


def test_many_owners_do_not_grow_the_scheduler_without_bound(client: redis.Redis) -> None:
    rig = Rig(client)
    owners = [owner_key(f"owner-{n}@example.com") for n in range(12_000)]
    try:
        for n, key in enumerate(owners):
            rig.scheduler.schedule(key, "remember")
            if n == 6_000:
                rig.clocks.advance(DELAY_MS)  # the first six thousand are stale from here on
        assert len(rig.scheduler._undelivered) <= 10_000
        assert rig.scheduler._surely_undelivered(owners[-1])
    finally:
        client.delete(*(keys.extraction_scheduled(k) for k in owners))
