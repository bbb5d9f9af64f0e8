"""Micro-batching: an owner's extraction waits for a fuller batch while sources
keep arriving, bounded by the quiet period and the oldest source's maximum wait.

Time is one manual clock, moved by the test, for the ledger, the scheduler and
the leases: nothing sleeps. The ledger and the engine are the in-memory twins;
the scheduler and the lease run on their twins (:class:`TestTwin`, no server)
and on Redis (:class:`TestRedis`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from memjobs_client.contracts import ACTOR_EXTRACT, ExtractFacts, RememberSource, owner_key, source_id_for
from memjobs_worker.memory.engine import InMemoryEngine
from memjobs_worker.memory.pipeline import MemoryPipeline
from memjobs_worker.memory.store import InMemoryStateStore
from tests.support.coordination import Coordination, OnRedis, Twin

KEY = owner_key("micro@example.com")
QUIET_MS = 500
MAX_WAIT_MS = 5_000
BATCH = 10


class Setup:
    def __init__(self, co: Coordination) -> None:
        self.co = co
        self.clock = co.clock
        self.store = InMemoryStateStore(clock=self.clock)
        self.sent: list[tuple[str, dict[str, Any], int | None]] = []
        self.scheduler = co.scheduler(self._enqueue, lease_ms=30_000, delay_ms=QUIET_MS)
        self.pipeline = MemoryPipeline(
            store=self.store,
            engine=InMemoryEngine(),
            leases=co.leases,
            scheduler=self.scheduler,
            batch_size=BATCH,
            lease_ms=30_000,
            max_wait_ms=MAX_WAIT_MS,
        )
        self.count = 0
        #: Messages sent and not yet delivered by :meth:`drive`: (due ms, trigger).
        self.queue: list[tuple[int, str]] = []
        self._seen = 0

    def _enqueue(self, actor: str, payload: dict[str, Any], delay_ms: int | None) -> None:
        self.sent.append((actor, payload, delay_ms))

    def advance(self, ms: int) -> None:
        self.co.advance(ms)

    def remember(self, n: int = 1) -> None:
        for _ in range(n):
            text = f"note number {self.count} about the garden"
            self.count += 1
            self.pipeline.remember(
                RememberSource(owner_key=KEY, source_id=source_id_for(KEY, text), text=text), sent_at=self.clock.now
            )

    def extract(self, trigger: str = "remember") -> str:
        return self.pipeline.extract(ExtractFacts(owner_key=KEY, trigger=trigger)).outcome  # type: ignore[arg-type]

    def drive(self, *, until_ms: int, arrivals: Sequence[int], step_ms: int = 100) -> None:
        """Let time pass in steps of ``step_ms``: a source remembered at each of
        ``arrivals`` (ms from now), and each extraction message delivered
        (extracted) once its delay is up, as a queue with idle workers would."""
        due_sources = set(arrivals)
        for now in range(0, until_ms + 1, step_ms):
            if now in due_sources:
                self.remember()
            self._deliver(now)
            self.advance(step_ms)

    def _deliver(self, now: int) -> None:
        while True:
            for _actor, payload, delay in self.sent[self._seen :]:
                self.queue.append((now + (delay or 0), payload["trigger"]))
            self._seen = len(self.sent)
            due = [m for m in self.queue if m[0] <= now]
            if not due:
                return
            for message in due:
                self.queue.remove(message)
                self.extract(message[1])

    def batches(self) -> list[int]:
        engine = self.pipeline.engine
        assert isinstance(engine, InMemoryEngine)
        return [len(b) for b in engine.extractions()]

    def waits_ms(self) -> list[int]:
        """How long each learned source waited, in order of arrival."""
        learned = sorted((r for r in self.store.list_sources(KEY) if r.learned_at), key=lambda r: r.created_at)
        return [int((r.learned_at - r.created_at).total_seconds() * 1000) for r in learned if r.learned_at]

    def pending(self) -> int:
        return sum(1 for r in self.store.list_sources(KEY) if r.state == "pending")

    def lease_held(self) -> bool:
        return self.scheduler.leases_held([KEY]) == [True]


class MicroBatching:
    """Micro-batching on whichever backend ``co`` is."""

    def test_an_extraction_waits_out_the_quiet_period_while_sources_keep_coming(self, s: Setup) -> None:
        s.remember(3)
        s.advance(100)
        s.sent.clear()
        assert s.extract() == "deferred"
        assert s.pending() == 3
        # Re-enqueued for the rest of the quiet period, the debounce flag kept.
        assert s.sent == [(ACTOR_EXTRACT, {"schema_version": 1, "owner_key": KEY, "trigger": "remember"}, 400)]
        assert s.scheduler.is_scheduled(KEY)

    def test_a_quiet_owner_is_learned_at_once(self, s: Setup) -> None:
        s.remember(3)
        s.advance(QUIET_MS)
        assert s.extract() == "done"
        assert s.pending() == 0

    def test_a_full_batch_does_not_wait(self, s: Setup) -> None:
        s.remember(BATCH)
        assert s.extract() == "done"
        assert s.pending() == 0

    def test_the_oldest_source_bounds_the_wait_under_a_steady_trickle(self, s: Setup) -> None:
        outcomes = []
        # A source every 600 ms, each extraction checked 100 ms after the newest:
        # never quiet, never a full batch, so only the oldest source's wait ends it.
        for _ in range(8):
            s.remember()
            s.advance(100)
            outcomes.append(s.extract())
            s.advance(500)
        assert outcomes == ["deferred"] * 8  # the oldest has waited 4,300 ms at the last check
        s.advance(MAX_WAIT_MS)
        s.remember()
        assert s.extract() == "done"
        assert s.pending() == 0

    def test_sweeps_forgets_and_session_ends_never_wait(self, s: Setup) -> None:
        for trigger in ("sweep", "forget", "session_end", "manual"):
            s.remember(2)
            assert s.extract(trigger) == "done"
            assert s.pending() == 0

    def test_micro_batching_is_off_when_its_wait_is_zero(self, s: Setup) -> None:
        s.pipeline.max_wait_ms = 0
        s.remember(2)
        assert s.extract() == "done"

    def test_a_partial_batch_after_a_full_one_waits_too_while_the_owner_talks(self, s: Setup) -> None:
        s.remember(BATCH + 3)
        s.advance(100)
        s.sent.clear()
        assert s.extract() == "done"
        # The full batch was learned; the three after it wait for their batch to fill,
        # re-enqueued with the debounce flag kept, and the lock let go meanwhile.
        assert s.pending() == 3
        assert s.sent == [
            (ACTOR_EXTRACT, {"schema_version": 1, "owner_key": KEY, "trigger": "remember"}, QUIET_MS - 100)
        ]
        assert s.scheduler.is_scheduled(KEY)
        assert not s.lease_held()
        s.advance(QUIET_MS)
        assert s.extract() == "done"
        assert s.pending() == 0

    def test_a_partial_batch_after_a_full_one_is_taken_at_once_by_other_triggers(self, s: Setup) -> None:
        s.remember(BATCH + 3)
        s.sent.clear()
        assert s.extract("sweep") == "done"
        assert s.pending() == 0
        assert s.sent == []

    def test_a_batch_filling_fast_is_looked_at_again_when_it_should_be_full(self, s: Setup) -> None:
        # Eight sources 40 ms apart: at this pace the last two come within 80 ms,
        # so the next look is then, not a whole quiet period (500 ms) later.
        for _ in range(8):
            s.remember()
            s.advance(40)
        s.sent.clear()
        assert s.extract() == "deferred"
        assert s.sent[-1][2] == 80
        s.advance(80)
        s.remember(2)
        assert s.extract() == "done"
        assert s.pending() == 0

    def test_a_burst_followed_by_silence_is_not_looked_at_again_and_again(self, s: Setup) -> None:
        s.remember(4)  # at one instant: no pace to go by but the silence since
        s.advance(100)
        s.sent.clear()
        assert s.extract() == "deferred"
        assert s.sent[-1][2] == QUIET_MS - 100

    def test_sources_that_arrive_during_a_batch_wait_for_the_deferred_run(self, s: Setup) -> None:
        # Two sources come while the full batch is with the model: they mark the
        # lease dirty. The run defers the three left and ends; it does not take
        # them at once as a batch of three (a backlog's batches of one or two).
        engine = s.pipeline.engine
        assert isinstance(engine, InMemoryEngine)
        extract = engine.extract

        def talking(owner: str, attempt_id: str, batch: Any) -> Any:
            if len(batch) == BATCH:
                s.advance(300)  # past the first half of the remember's message's delay
                s.remember(2)
            return extract(owner, attempt_id, batch)

        engine.extract = talking  # type: ignore[method-assign,assignment]
        s.remember(BATCH + 1)
        s.advance(100)
        assert s.extract() == "done"
        assert engine.extractions() and [len(b) for b in engine.extractions()] == [BATCH]
        assert s.pending() == 3
        assert not s.lease_held()
        assert s.scheduler.is_scheduled(KEY)  # the deferred message is on its way
        s.advance(QUIET_MS)
        assert s.extract() == "done"
        assert [len(b) for b in engine.extractions()] == [BATCH, 3]
        assert s.pending() == 0

    def test_a_steady_stream_is_learned_in_batches_that_fill_within_the_longest_wait(self, s: Setup) -> None:
        # One source a second, slower than the quiet period (500 ms): each used
        # to be learned alone. From the second source on, the owner's pace
        # shows (the source learned before it), and the batch waits for more
        # while the stream flows, until its oldest has waited MAX_WAIT_MS.
        s.drive(arrivals=range(0, 30_000, 1_000), until_ms=40_000)
        sizes = s.batches()
        assert sum(sizes) == 30 and s.pending() == 0
        assert sizes[0] == 1  # nothing to read a pace from: learned after the quiet period
        assert min(sizes[1:-1]) >= MAX_WAIT_MS // 1_000 + 1, sizes
        assert len(sizes) <= 7, sizes
        waits = s.waits_ms()
        assert max(waits) <= MAX_WAIT_MS + 100
        # When the stream stops, its last batch waits one and a half of its gaps
        # (a gap, and again its excess over the quiet period), not the longest wait.
        assert waits[-1] <= 1_500 + 100

    def test_a_burst_waits_for_a_deep_batch_and_goes_once_the_owner_is_quiet(self, s: Setup) -> None:
        # Twenty-five sources 50 ms apart (a backlog replayed, an import): at that
        # pace a deep batch of 40 fills within the longest wait, so the batch waits
        # for it, or for the owner to go quiet, instead of going at ten and again
        # for the rest (two model calls where one does).
        s.pipeline.deep_batch_size = 4 * BATCH
        s.drive(arrivals=range(0, 25 * 50, 50), until_ms=3_000, step_ms=50)
        assert s.batches() == [25] and s.pending() == 0
        # The last waited for the burst to end: silent for four of its gaps (and
        # the drive's step), not a whole quiet period.
        assert s.waits_ms()[-1] <= 4 * 50 + 50

    def test_a_stream_too_slow_to_fill_a_deep_batch_goes_at_the_batch_size(self, s: Setup) -> None:
        s.pipeline.deep_batch_size = 4 * BATCH
        # 200 ms apart: forty take 8 s, past the longest wait (5 s).
        s.drive(arrivals=range(0, 25 * 200, 200), until_ms=10_000, step_ms=50)
        assert s.batches()[0] == BATCH and sum(s.batches()) == 25 and s.pending() == 0

    def test_a_single_source_is_learned_after_the_quiet_period(self, s: Setup) -> None:
        s.drive(arrivals=[0], until_ms=2_000)
        assert s.batches() == [1]
        assert s.waits_ms() == [QUIET_MS]

    def test_a_source_long_after_a_stream_goes_after_the_quiet_period(self, s: Setup) -> None:
        s.drive(arrivals=[*range(0, 8_000, 1_000), 30_000], until_ms=32_000)
        assert s.pending() == 0
        assert s.waits_ms()[-1] == QUIET_MS

    def test_a_source_that_marks_the_lease_dirty_waits_for_its_batch(self, s: Setup) -> None:
        # A stream's batch goes when its oldest has waited MAX_WAIT_MS; a source
        # comes after the batch took every pending one, before the run lets go:
        # it marks the lease dirty. The run's "again" waits for the owner's batch
        # as a deferred message would, rather than learn that source alone at once.
        commit = s.store.commit_attempt
        came: list[bool] = []

        def then_a_source(attempt: Any, produced: Any) -> Any:
            result = commit(attempt, produced)
            if not came:
                came.append(True)
                s.advance(400)  # past the first half of a remember's message's delay
                s.remember()
            return result

        s.store.commit_attempt = then_a_source  # type: ignore[method-assign]
        for _ in range(6):
            s.remember()
            s.advance(1_000)
        assert s.extract() == "done"
        assert came and s.batches() == [6]
        assert s.pending() == 1
        assert not s.lease_held()
        assert s.scheduler.is_scheduled(KEY)  # the deferred message is on its way

    def test_a_deep_backlog_goes_in_larger_batches(self, s: Setup) -> None:
        s.pipeline.deep_batch_size = 2 * BATCH
        s.remember(2 * BATCH + 15)
        assert s.extract("sweep") == "done"
        # Twenty while two full batches wait, then ten, then the rest.
        assert s.batches() == [2 * BATCH, BATCH, 5]
        s.remember(2 * BATCH - 1)
        assert s.extract("sweep") == "done"
        assert s.batches()[3:] == [BATCH, BATCH - 1]


class TestTwin(MicroBatching):
    @pytest.fixture
    def s(self) -> Setup:
        return Setup(Twin())


class TestRedis(MicroBatching):
    @pytest.fixture
    def s(self, redis_url: str) -> Iterator[Setup]:
        with OnRedis(redis_url) as co:
            yield Setup(co)
