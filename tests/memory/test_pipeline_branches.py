"""Every branch of the memory pipeline, with no server at all.

The pipeline runs as in a worker — the real ``MemoryPipeline`` — on the twins:
the ledger, the memories, the scheduler and the fenced lease (held to
PostgreSQL's, mem0's and Redis's contract by ``test_store_contract.py``,
``test_engine_contract.py``, ``test_scheduler_contract.py`` and
``test_lease_contract.py``), and scheduled extractions run in the test's own
thread when it drains. Races are staged at the engine's ``before_extract``
seam, so nothing waits on the clock.
End to end through Dramatiq, PostgreSQL and mem0: ``test_pipeline.py``;
fencing, concurrency and faults: ``test_locks.py`` and ``test_faults.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from memjobs_client.contracts import (
    ACTOR_EXTRACT,
    ExtractFacts,
    ForgetSource,
    RememberSource,
    owner_key,
    source_id_for,
)
from memjobs_client.errors import BackendUnavailable, ModelUnavailable
from memjobs_worker.memory.engine import InMemoryEngine
from memjobs_worker.memory.engine.stub import Extractor
from memjobs_worker.memory.pipeline import ExtractReport, MemoryPipeline
from memjobs_worker.memory.store import Attempt, InMemoryStateStore, SourceRecord
from memjobs_worker.memory.store.base import AddOutcome
from memjobs_worker.model_output import ModelOutputInvalid
from tests.support.clocks import ManualClock
from tests.support.coordination import Twin

OWNER = "alice@example.com"
KEY = owner_key(OWNER)
LEASE_MS = 3000


class Rig:
    """A pipeline on the twins; scheduled extractions queue here until drained."""

    def __init__(self, *, extractor: Extractor | None = None, batch_size: int = 10) -> None:
        self.clock = ManualClock(step=timedelta(milliseconds=1))  # every event its own instant
        #: The leases and the scheduler's flags, on a monotonic clock of their own.
        self.co = Twin()
        self.store = InMemoryStateStore(clock=self.clock)
        self.engine = InMemoryEngine(extractor=extractor)
        self.scheduled: list[ExtractFacts] = []
        scheduler = self.co.scheduler(self._enqueue, lease_ms=LEASE_MS, delay_ms=0)
        self.pipeline = MemoryPipeline(
            store=self.store,
            engine=self.engine,
            leases=self.co.leases,
            scheduler=scheduler,
            batch_size=batch_size,
            lease_ms=LEASE_MS,
        )

    def _enqueue(self, actor: str, payload: dict[str, Any], delay_ms: int | None) -> None:
        assert (actor, delay_ms) == (ACTOR_EXTRACT, None)
        self.scheduled.append(ExtractFacts.model_validate(payload))

    def remember(self, text: str, *, sent_at: datetime | None = None, expect: AddOutcome | None = None) -> str:
        """What the remember job does; returns the source id the client would."""
        sid = source_id_for(KEY, text)
        outcome = self.pipeline.remember(
            RememberSource(owner_key=KEY, source_id=sid, text=text), sent_at=sent_at or self.clock()
        )
        if expect is not None:
            assert outcome == expect
        return sid

    def forget(self, source_id: str) -> bool:
        return self.pipeline.forget(ForgetSource(owner_key=KEY, source_id=source_id), sent_at=self.clock())

    def drain(self) -> list[ExtractReport]:
        """Run every scheduled extraction, and those they schedule, until none is left."""
        reports: list[ExtractReport] = []
        while self.scheduled:
            assert len(reports) < 100, "extractions keep scheduling each other"
            reports.append(self.pipeline.extract(self.scheduled.pop(0)))
        return reports

    def states(self) -> dict[str, str]:
        return {r.source_id: r.state for r in self.store.list_sources(KEY)}

    def texts(self) -> list[str]:
        return sorted(m.text for m in self.engine.list(KEY))


def echo(texts: Sequence[str]) -> list[str]:
    """A model that extracts every sentence as it was said."""
    return list(texts)


def scripted(*replies: list[str]) -> Extractor:
    """A model that answers each call with the next reply."""
    queue = list(replies)
    return lambda texts: queue.pop(0)


# -- remember and learn ---------------------------------------------------------------


def test_same_content_twice_is_stored_once() -> None:
    rig = Rig()
    first = rig.remember("I live in Hangzhou.", expect="created")
    second = rig.remember("  I live in Hangzhou.  ", expect="duplicate")
    rig.drain()
    assert first == second
    assert rig.states() == {first: "learned"}
    assert len(rig.engine.list(KEY)) == 1


def test_a_burst_of_sources_schedules_one_extraction() -> None:
    rig = Rig(extractor=echo)
    ids = [rig.remember(t) for t in ("我叫小林", "I like green tea", "我住在杭州")]
    assert [s.trigger for s in rig.scheduled] == ["remember"]
    [report] = rig.drain()
    assert (report.outcome, report.attempts, report.learned) == ("done", 1, 3)
    assert rig.engine.model_calls() == 1
    assert all(sorted(m.source_ids) == sorted(ids) for m in rig.pipeline.memories(KEY))


def test_batches_are_at_most_the_batch_size_and_provenance_is_per_batch() -> None:
    rig = Rig(extractor=echo, batch_size=2)
    texts = [f"fact number {n}" for n in range(5)]
    ids = [rig.remember(t) for t in texts]
    [report] = rig.drain()
    assert (report.attempts, report.learned, report.discarded) == (3, 5, 0)
    assert rig.engine.extractions() == [tuple(texts[0:2]), tuple(texts[2:4]), tuple(texts[4:])]
    batch_of = {sid: n // 2 for n, sid in enumerate(ids)}
    for memory in rig.pipeline.memories(KEY):
        [batch] = {batch_of[sid] for sid in memory.source_ids}
        assert sorted(memory.source_ids) == sorted(s for s, b in batch_of.items() if b == batch)
    assert set(rig.states().values()) == {"learned"}


def test_each_batch_goes_to_the_engine_only_after_the_wait_before_it() -> None:
    # (In a process whose pools share it, that wait lets the remembers go first.)
    rig = Rig(extractor=echo, batch_size=2)
    extracted_at_wait: list[int] = []
    rig.pipeline.before_batch = lambda: extracted_at_wait.append(len(rig.engine.extractions()))
    for n in range(5):
        rig.remember(f"fact number {n}")
    [report] = rig.drain()
    assert report.attempts == 3
    assert extracted_at_wait == [0, 1, 2]  # before each of the three, none after


def test_pending_sources_are_never_recalled() -> None:
    rig = Rig()
    rig.remember("I walk the dog at seven")
    assert rig.pipeline.recall(KEY, "dog", 5) == []
    assert rig.pipeline.memories(KEY) == []
    rig.drain()
    assert [h.text for h in rig.pipeline.recall(KEY, "dog", 5)] == ["I walk the dog at seven"]


def test_an_extraction_finding_the_lock_held_leaves_the_work_to_the_holder(monkeypatch: pytest.MonkeyPatch) -> None:
    """No lost wake-up: a source arriving after the holder's batch took every pending
    one (it looks no further), but before it released, is learned by that holder
    (the busy run set the dirty flag)."""
    rig = Rig()
    busy: list[ExtractReport] = []
    commit = rig.store.commit_attempt

    def commit_then_race(attempt: Attempt, produced: Any) -> Any:
        result = commit(attempt, produced)
        if not busy:  # the holder has taken every pending source and is about to release
            rig.remember("a source that arrives just before the release")
            busy.append(rig.pipeline.extract(ExtractFacts(owner_key=KEY)))
        return result

    monkeypatch.setattr(rig.store, "commit_attempt", commit_then_race)
    rig.remember("the first source")
    holder = rig.pipeline.extract(rig.scheduled.pop(0))
    assert busy[0].outcome == "busy"
    assert (holder.outcome, holder.attempts, holder.learned) == ("done", 2, 2)
    assert set(rig.states().values()) == {"learned"}
    rig.drain()  # what the new source scheduled finds nothing left
    assert rig.engine.extractions() == [("the first source",), ("a source that arrives just before the release",)]


# -- forget -------------------------------------------------------------------------


def test_forget_while_pending_learns_nothing() -> None:
    rig = Rig()
    sid = rig.remember("my locker number is 42")
    rig.forget(sid)
    rig.drain()
    assert rig.states() == {sid: "forgotten"}
    assert rig.engine.list(KEY) == []
    assert rig.pipeline.recall(KEY, "locker", 5) == []


def test_forget_overtaking_its_remember_wins() -> None:
    """forget runs before remember (separate queues): the late remember must not revive it."""
    rig = Rig()
    text = "the gate code hint is the cat's birthday"
    sent = rig.clock()  # the remember is sent first ...
    sid = source_id_for(KEY, text)
    assert rig.forget(sid) is False  # ... and the forget runs first
    rig.remember(text, sent_at=sent, expect="forgotten")
    rig.drain()
    assert rig.states() == {sid: "forgotten"}
    assert rig.engine.list(KEY) == []


def test_forget_after_learning_deletes_its_memory() -> None:
    rig = Rig()
    keep = rig.remember("我喜欢喝咖啡")
    drop = rig.remember("我对花生过敏")
    rig.drain()
    rig.forget(drop)
    rig.drain()
    assert rig.states() == {keep: "learned", drop: "forgotten"}
    assert [m.text for m in rig.engine.list(KEY)] == ["我喜欢喝咖啡"]
    assert all(drop not in hit.source_ids for hit in rig.pipeline.recall(KEY, "花生", 5))
    assert [r.text for r in rig.store.list_sources(KEY) if r.source_id == drop] == [None]


def test_remembering_again_after_forgetting_learns_again() -> None:
    rig = Rig()
    sid = rig.remember("call me Lin")
    rig.drain()
    rig.forget(sid)
    rig.drain()
    assert rig.remember("call me Lin", expect="revived") == sid
    rig.drain()
    assert rig.states() == {sid: "learned"}
    assert len(rig.pipeline.memories(KEY)) == 1


def test_forgetting_one_source_of_a_shared_memory_relearns_the_others() -> None:
    rig = Rig(extractor=scripted(["Lin lives in Hangzhou and likes tea"], ["Lin likes tea"]))
    a = rig.remember("I'm Lin, I live in Hangzhou")
    b = rig.remember("I like tea")
    rig.drain()
    [shared] = rig.pipeline.memories(KEY)
    assert sorted(shared.source_ids) == sorted([a, b])
    rig.forget(a)
    assert [s.trigger for s in rig.scheduled] == ["forget"]
    rig.drain()
    assert rig.states() == {a: "forgotten", b: "learned"}
    assert [(m.text, m.source_ids) for m in rig.pipeline.memories(KEY)] == [("Lin likes tea", [b])]
    assert [m.text for m in rig.engine.list(KEY)] == ["Lin likes tea"]
    second_prompt = "\n".join(rig.engine.extractions()[1])
    assert "I like tea" in second_prompt and "Hangzhou" not in second_prompt


def test_forget_during_extraction_never_marks_learned_and_deletes_new_memories() -> None:
    rig = Rig(extractor=echo)
    doomed = rig.remember("my old address is 12 Elm Street")
    kept = rig.remember("I walk the dog at seven")

    def forget_mid_flight(owner: str, batch: Sequence[SourceRecord]) -> None:
        if len(rig.engine.extractions()) == 1:  # the first extraction is in flight now
            assert rig.pipeline.recall(KEY, "dog", 5) == []  # pending: never recalled
            rig.forget(doomed)
            assert rig.states()[doomed] == "forgotten"  # the forget lands before the model answers

    rig.engine.before_extract = forget_mid_flight
    rig.drain()
    assert rig.states() == {doomed: "forgotten", kept: "learned"}
    assert [(m.text, m.source_ids) for m in rig.pipeline.memories(KEY)] == [("I walk the dog at seven", [kept])]
    assert [m.text for m in rig.engine.list(KEY)] == ["I walk the dog at seven"]


def test_without_a_model_forget_during_extraction_discards_only_that_sources_memory() -> None:
    """Verbatim memories derive from one source each: the others of the batch are
    learned at once, not sent back."""
    rig = Rig()
    doomed = rig.remember("my old address is 12 Elm Street")
    kept = rig.remember("I walk the dog at seven")

    def forget_mid_flight(owner: str, batch: Sequence[SourceRecord]) -> None:
        if len(rig.engine.extractions()) == 1:
            rig.forget(doomed)

    rig.engine.before_extract = forget_mid_flight
    [report] = rig.drain()
    assert (report.attempts, report.learned, report.discarded) == (1, 1, 1)
    assert rig.states() == {doomed: "forgotten", kept: "learned"}
    assert [(m.text, m.source_ids) for m in rig.pipeline.memories(KEY)] == [("I walk the dog at seven", [kept])]
    assert rig.texts() == ["I walk the dog at seven"]
    assert rig.store.tombstones(KEY) == []


# -- tombstones and recovery ----------------------------------------------------------------


def test_a_forget_whose_delete_fails_leaves_a_tombstone_the_next_run_settles() -> None:
    rig = Rig()
    keep = rig.remember("I drink coffee")
    drop = rig.remember("I am allergic to peanuts")
    rig.drain()
    [doomed] = [m.memory_id for m in rig.pipeline.memories(KEY) if m.source_ids == [drop]]
    rig.engine.fail_next("delete", BackendUnavailable("the vector store did not answer"))
    with pytest.raises(BackendUnavailable):
        rig.forget(drop)
    assert rig.states() == {keep: "learned", drop: "forgotten"}  # the ledger already forgot
    assert rig.store.tombstones(KEY) == [doomed]
    assert doomed in {m.memory_id for m in rig.engine.list(KEY)}  # still in the engine ...
    assert rig.pipeline.recall(KEY, "peanuts", 5) == []  # ... but never recalled
    report = rig.pipeline.extract(ExtractFacts(owner_key=KEY))
    assert report.outcome == "done"
    assert rig.store.tombstones(KEY) == []
    assert rig.texts() == ["I drink coffee"]


def test_co_sources_are_scheduled_even_when_the_forgets_delete_fails() -> None:
    """The ledger sends the co-sources back to pending in the forget's transaction;
    a retried forget finds nothing left to send back, so the first attempt schedules."""
    rig = Rig(extractor=scripted(["Lin lives in Hangzhou and likes tea"], ["Lin likes tea"]))
    a = rig.remember("I'm Lin, I live in Hangzhou")
    b = rig.remember("I like tea")
    rig.drain()
    rig.engine.fail_next("delete", BackendUnavailable("the vector store did not answer"))
    with pytest.raises(BackendUnavailable):
        rig.forget(a)
    assert rig.forget(a) is True  # Dramatiq's retry
    assert rig.states() == {a: "forgotten", b: "pending"}
    assert [s.trigger for s in rig.scheduled] == ["forget"]
    rig.drain()
    assert [(m.text, m.source_ids) for m in rig.pipeline.memories(KEY)] == [("Lin likes tea", [b])]
    assert rig.texts() == ["Lin likes tea"]


def test_a_discarded_memory_whose_delete_fails_is_deleted_by_the_next_holder() -> None:
    rig = Rig(extractor=echo)
    doomed = rig.remember("my old address is 12 Elm Street")
    kept = rig.remember("I walk the dog at seven")

    def forget_then_fail(owner: str, batch: Sequence[SourceRecord]) -> None:
        if len(rig.engine.extractions()) == 1:
            rig.forget(doomed)
            rig.engine.fail_next("delete", BackendUnavailable("the vector store did not answer"))

    rig.engine.before_extract = forget_then_fail
    with pytest.raises(BackendUnavailable):
        rig.drain()
    owed = rig.store.tombstones(KEY)
    assert len(owed) == 2  # both memories derive from the forgotten source too
    assert rig.states() == {doomed: "forgotten", kept: "pending"}
    assert rig.pipeline.memories(KEY) == []
    rig.pipeline.extract(ExtractFacts(owner_key=KEY))  # the retry
    assert rig.store.tombstones(KEY) == []
    assert rig.states() == {doomed: "forgotten", kept: "learned"}
    assert rig.texts() == ["I walk the dog at seven"]


def test_a_failed_extraction_is_undone_and_learned_on_the_retry() -> None:
    rig = Rig(extractor=echo)
    sid = rig.remember("I take the 7:40 train")
    rig.engine.fail_next("extract", ModelUnavailable("the model answered 500"))
    with pytest.raises(ModelUnavailable):
        rig.drain()
    assert rig.states() == {sid: "pending"}
    assert [e[3] for e in rig.store.attempt_events(KEY)] == ["aborted"]
    assert [c.method for c in rig.engine.calls][-1] == "delete_attempt"
    rig.pipeline.extract(ExtractFacts(owner_key=KEY))  # the retry
    assert rig.states() == {sid: "learned"}
    assert [e[3] for e in rig.store.attempt_events(KEY)] == ["aborted", "committed"]
    assert rig.texts() == ["I take the 7:40 train"]


def test_a_batch_the_model_answers_badly_fails_with_its_reason_and_the_next_goes_on() -> None:
    rig = Rig(extractor=echo, batch_size=1)
    bad, good = rig.remember("I moved to Hangzhou"), rig.remember("I take the 7:40 train")
    rig.engine.fail_next("extract", ModelOutputInvalid("the reply is not JSON (after 2 attempts)"))
    [report] = rig.drain()  # no exception: the job ends, it is not retried
    assert (report.outcome, report.attempts, report.failed, report.learned) == ("done", 2, 1, 1)
    assert report.failure == "model_output_invalid: the reply is not JSON (after 2 attempts)"
    records = {r.source_id: (r.state, r.reason) for r in rig.store.list_sources(KEY)}
    assert records == {bad: ("failed", report.failure), good: ("learned", None)}
    assert [e[3] for e in rig.store.attempt_events(KEY)] == ["aborted", "committed"]
    assert [(c.method, c.args) for c in rig.engine.calls[:2]] == [
        ("extract", (rig.store.attempt_events(KEY)[0][0], ("I moved to Hangzhou",))),
        ("delete_attempt", (rig.store.attempt_events(KEY)[0][0],)),
    ]
    assert rig.texts() == ["I take the 7:40 train"]
    assert rig.pipeline.extract(ExtractFacts(owner_key=KEY, trigger="sweep")).attempts == 0
    # Remembered again: pending, scheduled, learned.
    assert rig.remember("I moved to Hangzhou", expect="revived") == bad
    rig.drain()
    assert rig.states() == {bad: "learned", good: "learned"}
    # And a failed source is forgotten as any other.
    rig.engine.fail_next("extract", ModelOutputInvalid("the reply has no list 'memory'"))
    doomed = rig.remember("my locker is 42")
    rig.drain()
    assert rig.forget(doomed)
    [record] = [r for r in rig.store.list_sources(KEY) if r.source_id == doomed]
    assert (record.state, record.text, record.reason) == ("forgotten", None, None)


def test_memories_of_a_crashed_attempt_are_deleted_before_the_next_one() -> None:
    """What kill -9 between mem0's insert and the ledger commit leaves behind."""
    rig = Rig(extractor=echo)
    sid = rig.remember("I am learning the cello")
    rig.drain()
    # Simulate a holder that inserted memories and died before committing.
    text = "I play chess on Sundays"
    new = source_id_for(KEY, text)
    rig.store.add_source(RememberSource(owner_key=KEY, source_id=new, text=text), sent_at=rig.clock())
    dead = rig.co.lease(lease_ms=LEASE_MS, owner=KEY)
    lost = dead.try_acquire(floor=rig.store.newest_token(KEY))
    assert lost is not None
    crashed = rig.store.begin_attempt(KEY, lost, 10)
    assert crashed is not None
    orphans = rig.engine.extract(KEY, crashed.attempt_id, crashed.sources)
    assert len(orphans) == 1
    assert rig.pipeline.extract(ExtractFacts(owner_key=KEY)).outcome == "busy"  # not yet expired
    rig.co.advance(LEASE_MS)  # the dead holder's lease runs out
    report = rig.pipeline.extract(ExtractFacts(owner_key=KEY))
    assert report.recovered == 1
    assert rig.states() == {sid: "learned", new: "learned"}
    assert rig.texts() == ["I am learning the cello", "I play chess on Sundays"]
    events = rig.store.attempt_events(KEY)
    assert [e[3] for e in events].count("abandoned") == 1
