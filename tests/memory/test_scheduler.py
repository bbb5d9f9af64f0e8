"""The debounced scheduling of an owner's extraction: one message per burst,
and one round trip per burst rather than one per source, without a source
ever left for the sweeper.

Time is injected (one manual clock for the ledger, the scheduler and the
leases, which :meth:`~tests.support.coordination.Coordination.advance` also
passes on Redis): nothing sleeps. The messages are kept by the test, which
delivers them itself. Each test runs on the twins (:class:`TestTwin`, no
server) and on Redis (:class:`TestRedis`).
"""

from __future__ import annotations

from typing import Any

import pytest

from memjobs_client.contracts import ExtractFacts, RememberSource, owner_key, source_id_for
from memjobs_worker.memory.engine import InMemoryEngine
from memjobs_worker.memory.pipeline import MemoryPipeline
from memjobs_worker.memory.store import InMemoryStateStore
from tests.support.coordination import Coordination, OnRedisBackend, OnTwinBackend

KEY = owner_key("scheduled@example.com")
DELAY_MS = 500


class Rig:
    def __init__(self, co: Coordination, *, delay_ms: int = DELAY_MS) -> None:
        self.co = co
        self.clocks = co.clock
        self.sent: list[tuple[dict[str, Any], int | None]] = []
        self.store = InMemoryStateStore(clock=self.clocks)
        self.scheduler = co.scheduler(self._enqueue, lease_ms=30_000, delay_ms=delay_ms)
        self.pipeline = MemoryPipeline(
            store=self.store,
            engine=InMemoryEngine(),
            leases=co.leases,
            scheduler=self.scheduler,
            batch_size=10,
            lease_ms=30_000,
            max_wait_ms=5_000,
        )
        self.count = 0
        self.refuse_sends = False

    def _enqueue(self, actor: str, payload: dict[str, Any], delay_ms: int | None) -> None:
        if self.refuse_sends:
            raise ConnectionError("Redis refused the send")
        self.sent.append((payload, delay_ms))

    def advance(self, ms: int) -> None:
        self.co.advance(ms)

    def remember(self) -> str:
        text = f"note number {self.count} about the orchard"
        self.count += 1
        sid = source_id_for(KEY, text)
        self.pipeline.remember(RememberSource(owner_key=KEY, source_id=sid, text=text), sent_at=self.clocks.now)
        return sid

    def deliver(self, payload: dict[str, Any]) -> str:
        return self.pipeline.extract(ExtractFacts.model_validate(payload)).outcome

    def flag_set(self) -> bool:
        return self.scheduler.is_scheduled(KEY)

    def states(self) -> set[str]:
        return {r.state for r in self.store.list_sources(KEY)}


class SchedulingContract:
    """How a burst is scheduled, on whichever backend ``co`` is."""

    def test_a_burst_within_half_the_delay_sets_the_flag_once(self, co: Coordination) -> None:
        rig = Rig(co)
        rig.remember()
        assert rig.flag_set() and len(rig.sent) == 1
        # The flag gone (as when an extraction starts): a source that went to Redis
        # would set it again; one within half the delay of our own message does not.
        rig.scheduler.clear(KEY)
        rig.advance(DELAY_MS // 2 - 1)
        rig.remember()
        assert not rig.flag_set() and len(rig.sent) == 1

    def test_a_retried_remember_whose_first_send_failed_schedules_its_extraction(self, co: Coordination) -> None:
        """The first attempt wrote the ledger, then could not send (Redis full or
        away); the job's retry finds a pending duplicate and must still schedule,
        not leave the source to the sweeper."""
        rig = Rig(co)
        text = "the orchard's gate code changed"
        payload = RememberSource(owner_key=KEY, source_id=source_id_for(KEY, text), text=text)
        rig.refuse_sends = True
        with pytest.raises(ConnectionError):
            rig.pipeline.remember(payload, sent_at=rig.clocks.now)
        assert rig.states() == {"pending"} and rig.sent == []
        rig.refuse_sends = False
        assert rig.pipeline.remember(payload, sent_at=rig.clocks.now) == "duplicate"
        [(message, _)] = rig.sent
        rig.advance(DELAY_MS)
        assert rig.deliver(message) == "done" and rig.states() == {"learned"}

    def test_after_half_the_delay_a_source_asks_redis_again(self, co: Coordination) -> None:
        rig = Rig(co)
        rig.remember()
        rig.scheduler.clear(KEY)
        rig.advance(DELAY_MS // 2)
        rig.remember()
        assert rig.flag_set() and len(rig.sent) == 2

    def test_a_source_that_skipped_the_flag_is_learned_by_the_message_in_its_delay(self, co: Coordination) -> None:
        rig = Rig(co)
        first = rig.remember()
        [(message, delay_ms)] = rig.sent
        assert delay_ms == DELAY_MS
        # Another trigger runs the owner's extraction meanwhile: it clears the flag
        # and learns the first source.
        assert rig.pipeline.extract(ExtractFacts(owner_key=KEY, trigger="sweep")).outcome == "done"
        assert {r.source_id: r.state for r in rig.store.list_sources(KEY)} == {first: "learned"}
        rig.advance(100)
        rig.remember()  # within half the delay: no flag, no message
        assert not rig.flag_set() and len(rig.sent) == 1
        # The first message, delivered after its delay, finds the second source.
        rig.advance(DELAY_MS)
        assert rig.deliver(message) == "done"
        assert rig.states() == {"learned"}

    def test_a_deferred_message_also_spares_the_flag_for_half_its_delay(self, co: Coordination) -> None:
        rig = Rig(co)
        rig.remember()
        rig.advance(100)
        assert rig.deliver(rig.sent.pop()[0]) == "deferred"  # the owner is still talking
        [(message, delay_ms)] = rig.sent
        assert delay_ms == DELAY_MS - 100
        rig.scheduler.clear(KEY)
        rig.advance((DELAY_MS - 100) // 2 - 1)
        rig.remember()
        assert not rig.flag_set() and len(rig.sent) == 1
        rig.advance(DELAY_MS)
        assert rig.deliver(message) == "done"
        assert rig.states() == {"learned"}

    def test_the_half_delay_counts_from_the_send_not_from_its_return(self, co: Coordination) -> None:
        rig = Rig(co)
        slow = rig.scheduler.enqueue

        def enqueue_slowly(actor: str, payload: dict[str, Any], delay_ms: int | None) -> None:
            rig.advance(DELAY_MS // 2)  # a Redis that took its time to answer
            slow(actor, payload, delay_ms)

        rig.scheduler.enqueue = enqueue_slowly
        rig.remember()
        rig.scheduler.clear(KEY)
        rig.remember()
        assert rig.flag_set() and len(rig.sent) == 2

    def test_force_always_goes_to_redis_and_sends(self, co: Coordination) -> None:
        rig = Rig(co)
        rig.remember()
        rig.scheduler.clear(KEY)
        assert rig.scheduler.schedule(KEY, "forget", force=True)
        assert rig.flag_set() and len(rig.sent) == 2

    def test_without_a_delay_every_source_asks_redis(self, co: Coordination) -> None:
        rig = Rig(co, delay_ms=0)
        rig.remember()
        rig.scheduler.clear(KEY)
        rig.remember()
        assert rig.flag_set() and [d for _, d in rig.sent] == [None, None]

    def test_many_owners_do_not_grow_the_scheduler_without_bound(self, co: Coordination) -> None:
        rig = Rig(co)
        owners = [owner_key(f"owner-{n}@example.com") for n in range(12_000)]
        for n, key in enumerate(owners):
            rig.scheduler.schedule(key, "remember")
            if n == 6_000:
                rig.advance(DELAY_MS)  # the first six thousand are stale from here on
        assert len(rig.scheduler._undelivered) <= 10_000
        assert rig.scheduler._surely_undelivered(owners[-1])


class TestTwin(OnTwinBackend, SchedulingContract):
    pass


class TestRedis(OnRedisBackend, SchedulingContract):
    pass
