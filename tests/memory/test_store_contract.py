"""The state-store contract, run against the in-memory twin and PostgreSQL alike:
outcomes of remember and forget, the ledger's order, fencing tokens, extraction
attempts, provenance, tombstones and counts."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest

from memjobs_client.contracts import RememberSource, owner_key, source_id_for
from memjobs_client.errors import StaleFencingToken
from memjobs_worker.memory.store import (
    Attempt,
    PendingWindow,
    Produced,
    StateStore,
)
from memjobs_worker.memory.store.sql import SqlStateStore
from tests.support.clocks import T0, ManualClock

KEY = owner_key("alice")
OTHER = owner_key("bob")


def remember(
    store: StateStore, text: str, key: str = KEY, *, sent_at: datetime = T0, session_id: str | None = None
) -> str:
    sid = source_id_for(key, text)
    outcome = store.add_source(
        RememberSource(owner_key=key, source_id=sid, text=text, session_id=session_id), sent_at=sent_at
    )
    assert outcome == "created"
    return sid


def states(store: StateStore, key: str = KEY) -> dict[str, str]:
    return {r.source_id: r.state for r in store.list_sources(key)}


def learn(store: StateStore, token: int, *memories: Produced, key: str = KEY) -> Attempt:
    attempt = store.begin_attempt(key, token, 100)
    assert attempt is not None
    store.commit_attempt(attempt, memories)
    return attempt


# -- sources ------------------------------------------------------------------------


def test_a_new_source_is_pending_with_what_was_sent(store: StateStore, clock: ManualClock) -> None:
    sid = remember(store, "I like tea", session_id="s-1")
    [record] = store.list_sources(KEY)
    assert (record.source_id, record.owner_key, record.state, record.kind, record.session_id, record.text) == (
        sid,
        KEY,
        "pending",
        "utterance",
        "s-1",
        "I like tea",
    )
    assert record.created_at == record.updated_at == clock.now
    assert record.learned_at is None


def test_the_same_source_twice_is_a_duplicate_stored_once(store: StateStore) -> None:
    sid = remember(store, "I like tea")
    again = RememberSource(owner_key=KEY, source_id=sid, text="I like tea")
    assert store.add_source(again, sent_at=T0) == "duplicate"
    assert states(store) == {sid: "pending"}


def test_sources_are_listed_per_owner_oldest_first(store: StateStore) -> None:
    first = remember(store, "first")
    second = remember(store, "second")
    remember(store, "bob's", OTHER)
    assert [r.source_id for r in store.list_sources(KEY)] == [first, second]
    assert store.list_sources(owner_key("nobody")) == []


def test_a_remember_sent_before_the_forget_stays_forgotten(store: StateStore) -> None:
    sid = remember(store, "my locker is 42")
    assert store.forget(KEY, sid, sent_at=T0 + timedelta(seconds=5)).found
    late = RememberSource(owner_key=KEY, source_id=sid, text="my locker is 42")
    assert store.add_source(late, sent_at=T0 + timedelta(seconds=5)) == "forgotten"
    assert states(store) == {sid: "forgotten"}


def test_a_remember_sent_after_the_forget_revives_the_source(store: StateStore) -> None:
    sid = remember(store, "call me Lin")
    learn(store, 1, Produced("m1", (sid,)))
    store.forget(KEY, sid, sent_at=T0 + timedelta(seconds=5))
    again = RememberSource(owner_key=KEY, source_id=sid, text="call me Lin", kind="explicit")
    assert store.add_source(again, sent_at=T0 + timedelta(seconds=6)) == "revived"
    [record] = store.list_sources(KEY)
    assert (record.state, record.text, record.kind, record.learned_at) == ("pending", "call me Lin", "explicit", None)


def test_a_forget_overtaking_its_remember_leaves_a_forgotten_marker(store: StateStore) -> None:
    sid = source_id_for(KEY, "the gate code hint")
    assert store.forget(KEY, sid, sent_at=T0 + timedelta(seconds=1)).found is False
    late = RememberSource(owner_key=KEY, source_id=sid, text="the gate code hint")
    assert store.add_source(late, sent_at=T0) == "forgotten"
    [record] = store.list_sources(KEY)
    assert (record.state, record.text) == ("forgotten", None)


def test_counts_cover_every_state_of_every_owner(store: StateStore) -> None:
    assert store.counts_by_state() == {"pending": 0, "learned": 0, "forgotten": 0, "failed": 0}
    learned = remember(store, "learned one")
    learn(store, 1, Produced("m1", (learned,)))
    remember(store, "failed one")
    attempt = store.begin_attempt(KEY, 2, 10)
    assert attempt is not None
    store.fail_attempt(attempt, "model_output_invalid: the reply is not JSON (after 2 attempts)")
    remember(store, "pending one")
    remember(store, "bob pending", OTHER)
    store.forget(OTHER, source_id_for(OTHER, "never sent"), sent_at=T0)
    assert store.counts_by_state() == {"pending": 2, "learned": 1, "forgotten": 1, "failed": 1}


def test_oldest_pending_and_owners_pending_since(store: StateStore, clock: ManualClock) -> None:
    assert store.oldest_pending_at() is None
    assert store.owners_pending_since(T0 + timedelta(days=1)) == []
    remember(store, "early")
    early = clock.now
    clock.advance(minutes=5)
    remember(store, "late", OTHER)
    assert store.oldest_pending_at() == early
    assert store.owners_pending_since(early) == [KEY]
    assert sorted(store.owners_pending_since(clock.now)) == sorted([KEY, OTHER])
    learn(store, 1, Produced("m1", (source_id_for(KEY, "early"),)))
    assert store.owners_pending_since(clock.now) == [OTHER]


# -- attempts and fencing ----------------------------------------------------------------


def test_begin_claims_the_oldest_pending_up_to_the_batch_size(store: StateStore) -> None:
    ids = [remember(store, f"fact {n}") for n in range(5)]
    assert store.begin_attempt(OTHER, 1, 10) is None
    attempt = store.begin_attempt(KEY, 1, 3)
    assert attempt is not None
    assert (attempt.owner_key, attempt.token) == (KEY, 1)
    assert [s.source_id for s in attempt.sources] == ids[:3]
    assert store.open_attempts(KEY) == [attempt.attempt_id]
    assert store.open_attempts(OTHER) == []


def test_a_backlog_of_two_batches_or_more_is_taken_in_deep_batches(store: StateStore) -> None:
    ids = [remember(store, f"fact {n}") for n in range(9)]
    others = [remember(store, f"bob's {n}", OTHER) for n in range(7)]
    # 9 pending, batches of 4: two batches' worth and more, so a deep one (7).
    deep = store.begin_attempt(KEY, 1, 4, 7)
    assert deep is not None and [s.source_id for s in deep.sources] == ids[:7]
    # 7 pending are less than two batches of 4 (another owner's never count): 4.
    normal = store.begin_attempt(OTHER, 1, 4, 7)
    assert normal is not None and [s.source_id for s in normal.sources] == others[:4]
    store.abort_attempt(deep)
    # A deep size under the batch size: never smaller.
    assert len(store.begin_attempt(KEY, 1, 4, 2).sources) == 4  # type: ignore[union-attr]


def test_a_batch_stops_before_the_source_that_would_take_its_texts_past_its_bytes(store: StateStore) -> None:
    texts = ["I keep the bicycle in the shed", "我的自行车在花园的棚子里", "tea at four", "ok"]
    ids = [remember(store, t, sent_at=T0 + timedelta(seconds=n)) for n, t in enumerate(texts)]
    sizes = [len(t.encode()) for t in texts]  # 30, 36 (three bytes a character), 11, 2
    # The first two fit exactly; the third would take the batch past them.
    attempt = store.begin_attempt(KEY, 1, 10, 0, sizes[0] + sizes[1])
    assert attempt is not None and [s.source_id for s in attempt.sources] == ids[:2]
    store.abort_attempt(attempt)
    # The first source goes whatever its size; 0 is no bound; a deep batch keeps the bound.
    attempt = store.begin_attempt(KEY, 1, 10, 0, 4)
    assert attempt is not None and [s.source_id for s in attempt.sources] == ids[:1]
    store.abort_attempt(attempt)
    attempt = store.begin_attempt(KEY, 1, 10, 0, 0)
    assert attempt is not None and [s.source_id for s in attempt.sources] == ids
    store.abort_attempt(attempt)
    attempt = store.begin_attempt(KEY, 1, 1, 4, sum(sizes[:3]))
    assert attempt is not None and [s.source_id for s in attempt.sources] == ids[:3]


def test_an_attempt_says_whether_more_sources_were_pending_than_it_took(store: StateStore) -> None:
    texts = ["I keep the bicycle in the shed", "tea at four", "ok"]
    for n, t in enumerate(texts):
        remember(store, t, sent_at=T0 + timedelta(seconds=n))
    for limits, more in (((2,), True), ((3,), False), ((10,), False), ((10, 0, 31), True), ((1, 3), False)):
        attempt = store.begin_attempt(KEY, 1, *limits)
        assert attempt is not None and attempt.more is more, limits
        store.abort_attempt(attempt)


def test_commit_marks_learned_and_records_provenance(store: StateStore) -> None:
    a, b = remember(store, "I'm Lin"), remember(store, "I like tea")
    attempt = store.begin_attempt(KEY, 1, 10)
    assert attempt is not None
    result = store.commit_attempt(attempt, [Produced("m1", (a, b)), Produced("m2", (b,))])
    assert (sorted(result.learned), result.discarded, result.still_pending) == (sorted([a, b]), [], [])
    assert states(store) == {a: "learned", b: "learned"}
    assert all(r.learned_at is not None for r in store.list_sources(KEY))
    assert store.learned_provenance(KEY) == {"m1": sorted([a, b]), "m2": [b]}
    assert store.learned_provenance(KEY, ["m2", "unknown"]) == {"m2": [b]}
    assert store.learned_provenance(KEY, ["m1"]) == {"m1": sorted([a, b])}
    assert store.learned_provenance(KEY, []) == {}
    assert store.learned_provenance(OTHER, ["m1", "m2"]) == {}
    assert store.learned_provenance(OTHER) == {}
    assert store.open_attempts(KEY) == []


def test_pruning_deletes_ended_attempts_started_before_the_cut_and_keeps_open_ones(
    store: StateStore, clock: ManualClock
) -> None:
    remember(store, "the first batch")
    old_done = learn(store, 1)
    remember(store, "the second batch")
    old_open = store.begin_attempt(KEY, 1, 10)  # a holder crashed: the next one undoes it
    assert old_open is not None
    clock.advance(days=8)
    cut = clock.now
    remember(store, "a recent batch", OTHER)
    recent_done = learn(store, 1, key=OTHER)
    assert store.prune_attempts(cut) == 1
    assert [e[0] for e in store.attempt_events(KEY)] == [old_open.attempt_id]
    assert [e[0] for e in store.attempt_events(OTHER)] == [recent_done.attempt_id]
    assert store.open_attempts(KEY) == [old_open.attempt_id]
    assert old_done.attempt_id not in {e[0] for e in store.attempt_events(KEY)}
    assert store.prune_attempts(cut) == 0


def test_a_stale_token_is_refused_everywhere_and_writes_nothing(store: StateStore) -> None:
    remember(store, "the spare key is under the blue pot")
    stale = store.begin_attempt(KEY, 1, 10)
    assert stale is not None
    newer = store.begin_attempt(KEY, 2, 10)  # a newer holder was seen
    assert newer is not None
    with pytest.raises(StaleFencingToken):
        store.commit_attempt(stale, [Produced("ghost", tuple(s.source_id for s in stale.sources))])
    with pytest.raises(StaleFencingToken):
        store.begin_attempt(KEY, 1, 10)
    with pytest.raises(StaleFencingToken):
        store.close_abandoned(KEY, 1, [newer.attempt_id])
    assert set(states(store).values()) == {"pending"}
    assert store.learned_provenance(KEY) == {}
    assert sorted(store.open_attempts(KEY)) == sorted([stale.attempt_id, newer.attempt_id])
    store.commit_attempt(newer, [])
    assert set(states(store).values()) == {"learned"}


def test_fencing_tokens_are_per_owner_and_the_same_token_is_accepted(store: StateStore) -> None:
    remember(store, "alice's")
    remember(store, "bob's", OTHER)
    assert store.begin_attempt(KEY, 7, 10) is not None
    assert store.begin_attempt(OTHER, 1, 10) is not None  # bob's tokens are his own
    again = store.begin_attempt(KEY, 7, 10)
    assert again is not None
    store.commit_attempt(again, [])
    assert set(states(store).values()) == {"learned"}


def test_an_empty_begin_still_records_the_newest_token(store: StateStore) -> None:
    remember(store, "old holder's source")
    old = store.begin_attempt(KEY, 1, 10)
    assert old is not None
    store.commit_attempt(old, [])
    assert store.begin_attempt(KEY, 5, 10) is None  # nothing pending, token 5 seen
    remember(store, "a new source")
    with pytest.raises(StaleFencingToken):
        store.begin_attempt(KEY, 4, 10)


def test_a_source_forgotten_during_extraction_discards_its_memories(store: StateStore) -> None:
    doomed, kept, alone = (remember(store, t) for t in ("old address", "walks the dog", "tea"))
    attempt = store.begin_attempt(KEY, 1, 10)
    assert attempt is not None
    assert store.forget(KEY, doomed, sent_at=T0).memory_ids == []
    result = store.commit_attempt(attempt, [Produced("shared", (doomed, kept)), Produced("own", (alone,))])
    assert (result.learned, result.discarded, result.still_pending) == ([alone], ["shared"], [kept])
    assert states(store) == {doomed: "forgotten", kept: "pending", alone: "learned"}
    assert store.tombstones(KEY) == ["shared"]
    assert store.learned_provenance(KEY) == {"own": [alone]}


def test_abort_closes_the_attempt_and_leaves_the_sources_pending(store: StateStore) -> None:
    sid = remember(store, "learning the cello")
    attempt = store.begin_attempt(KEY, 1, 10)
    assert attempt is not None
    store.abort_attempt(attempt)
    assert store.open_attempts(KEY) == []
    assert states(store) == {sid: "pending"}
    assert [e[3] for e in store.attempt_events(KEY)] == ["aborted"]


REASON = "model_output_invalid: the reply has no list 'memory' (after 2 attempts)"


def test_a_failed_attempt_marks_its_pending_sources_failed_with_the_reason(
    store: StateStore,
    clock: ManualClock,
) -> None:
    first, second = remember(store, "I moved to Hangzhou"), remember(store, "我不吃香菜")
    forgotten = remember(store, "my locker is 42")
    attempt = store.begin_attempt(KEY, 1, 10)
    assert attempt is not None
    store.forget(KEY, forgotten, sent_at=T0)  # during the extraction: it stays forgotten
    assert store.fail_attempt(attempt, REASON) == sorted([first, second])
    records = {r.source_id: r for r in store.list_sources(KEY)}
    assert {sid: (r.state, r.reason) for sid, r in records.items()} == {
        first: ("failed", REASON),
        second: ("failed", REASON),
        forgotten: ("forgotten", None),
    }
    assert records[first].text == "I moved to Hangzhou"  # kept: remembering it again retries it
    assert records[first].updated_at == records[second].updated_at <= clock.now
    assert store.open_attempts(KEY) == []
    assert [e[3] for e in store.attempt_events(KEY)] == ["aborted"]
    # Final: no longer pending, so neither the sweeper nor the next batch takes it.
    assert store.pending_window(KEY).count == 0
    assert store.oldest_pending_at() is None
    assert store.owners_pending_since(clock.now + timedelta(days=1)) == []
    assert store.begin_attempt(KEY, 1, 10) is None
    assert store.learned_provenance(KEY) == {}


def test_a_stale_holder_cannot_fail_an_attempt(store: StateStore) -> None:
    sid = remember(store, "I swim on Fridays")
    attempt = store.begin_attempt(KEY, 1, 10)
    assert attempt is not None
    store.close_abandoned(KEY, 2, [])  # a newer holder has been seen
    with pytest.raises(StaleFencingToken):
        store.fail_attempt(attempt, REASON)
    assert states(store) == {sid: "pending"}
    assert store.open_attempts(KEY) == [attempt.attempt_id]


def test_remembering_a_failed_source_again_makes_it_pending_without_its_reason(
    store: StateStore,
) -> None:
    sid = remember(store, "I take the 7:40 train")
    attempt = store.begin_attempt(KEY, 1, 10)
    assert attempt is not None
    store.fail_attempt(attempt, REASON)
    again = RememberSource(owner_key=KEY, source_id=sid, text="I take the 7:40 train")
    # Any later request, whatever its producer's clock said: that is how a user asks again.
    assert store.add_source(again, sent_at=T0 - timedelta(days=1)) == "revived"
    [record] = store.list_sources(KEY)
    assert (record.state, record.reason, record.text) == ("pending", None, "I take the 7:40 train")
    assert store.add_source(again, sent_at=T0) == "duplicate"  # pending now: as for any source


def test_forgetting_a_failed_source_purges_its_text_and_reason(store: StateStore) -> None:
    sid = remember(store, "my sister lives in Suzhou")
    attempt = store.begin_attempt(KEY, 1, 10)
    assert attempt is not None
    store.fail_attempt(attempt, REASON)
    result = store.forget(KEY, sid, sent_at=T0 + timedelta(seconds=1))
    assert (result.found, result.memory_ids, result.relearn) == (True, [], [])
    [record] = store.list_sources(KEY)
    assert (record.state, record.text, record.reason) == ("forgotten", None, None)


def test_attempts_left_open_are_closed_as_abandoned_in_order(store: StateStore) -> None:
    remember(store, "chess on Sundays")
    crashed = store.begin_attempt(KEY, 1, 10)
    assert crashed is not None
    store.close_abandoned(KEY, 2, [])  # nothing to close: no change, no fencing needed
    store.close_abandoned(KEY, 2, store.open_attempts(KEY))
    assert store.open_attempts(KEY) == []
    committed = learn(store, 2)
    events = store.attempt_events(KEY)
    assert [(e[0], e[3]) for e in events] == [(crashed.attempt_id, "abandoned"), (committed.attempt_id, "committed")]
    sequence = [events[0][1], events[0][2], events[1][1], events[1][2]]
    assert sequence == sorted(n for n in sequence if n is not None)  # none missing, in order
    assert store.attempt_events(OTHER) == []


# -- forgetting, tombstones, provenance ------------------------------------------------------


def test_forget_of_a_learned_source_tombstones_its_memories(store: StateStore) -> None:
    keep, drop = remember(store, "coffee"), remember(store, "peanuts")
    learn(store, 1, Produced("m_keep", (keep,)), Produced("m_drop", (drop,)))
    result = store.forget(KEY, drop, sent_at=T0)
    assert (result.found, result.memory_ids, result.relearn) == (True, ["m_drop"], [])
    assert states(store) == {keep: "learned", drop: "forgotten"}
    assert [r.text for r in store.list_sources(KEY) if r.source_id == drop] == [None]
    assert store.tombstones(KEY) == ["m_drop"]
    assert store.learned_provenance(KEY) == {"m_keep": [keep]}
    store.clear_tombstones(["m_drop"])
    assert store.tombstones(KEY) == []


def test_forget_of_one_source_of_a_shared_memory_sends_the_others_back(store: StateStore) -> None:
    a, b = remember(store, "I'm Lin, in Hangzhou"), remember(store, "I like tea")
    learn(store, 1, Produced("shared", (a, b)))
    result = store.forget(KEY, a, sent_at=T0)
    assert (result.memory_ids, result.relearn) == (["shared"], [b])
    assert states(store) == {a: "forgotten", b: "pending"}
    assert store.learned_provenance(KEY) == {}
    attempt = store.begin_attempt(KEY, 2, 10)
    assert attempt is not None and [s.source_id for s in attempt.sources] == [b]


def test_forget_of_a_pending_source_has_no_memories(store: StateStore) -> None:
    sid = remember(store, "locker 42")
    result = store.forget(KEY, sid, sent_at=T0)
    assert (result.found, result.memory_ids, result.relearn) == (True, [], [])
    assert store.tombstones(KEY) == []
    assert store.begin_attempt(KEY, 1, 10) is None


def test_forget_by_another_owner_changes_nothing(store: StateStore) -> None:
    sid = remember(store, "mine")
    learn(store, 1, Produced("m1", (sid,)))
    assert store.forget(OTHER, sid, sent_at=T0).found is False
    assert states(store) == {sid: "learned"}
    assert store.learned_provenance(KEY) == {"m1": [sid]}


def test_tombstones_are_per_owner(store: StateStore) -> None:
    mine, theirs = remember(store, "mine"), remember(store, "theirs", OTHER)
    learn(store, 1, Produced("m_mine", (mine,)))
    learn(store, 1, Produced("m_theirs", (theirs,)), key=OTHER)
    store.forget(KEY, mine, sent_at=T0)
    store.forget(OTHER, theirs, sent_at=T0)
    assert (store.tombstones(KEY), store.tombstones(OTHER)) == (["m_mine"], ["m_theirs"])
    store.clear_tombstones([])
    store.clear_tombstones(["m_mine", "never-existed"])
    assert (store.tombstones(KEY), store.tombstones(OTHER)) == ([], ["m_theirs"])


def test_what_a_new_holder_owes_is_the_open_attempts_and_tombstones_of_its_owner(
    store: StateStore,
) -> None:
    gone = remember(store, "gone soon")
    learn(store, 1, Produced("m_gone", (gone,)))
    store.forget(KEY, gone, sent_at=T0)
    kept = remember(store, "kept")
    crashed = store.begin_attempt(KEY, 2, 10)
    assert crashed is not None and [s.source_id for s in crashed.sources] == [kept]
    theirs = remember(store, "theirs", OTHER)
    learn(store, 1, Produced("m_theirs", (theirs,)), key=OTHER)
    store.forget(OTHER, theirs, sent_at=T0)
    assert store.owed(KEY) == ([crashed.attempt_id], ["m_gone"])
    assert store.owed(KEY) == (store.open_attempts(KEY), store.tombstones(KEY))
    store.close_abandoned(KEY, 3, [crashed.attempt_id])
    store.clear_tombstones(["m_gone"])
    assert store.owed(KEY) == ([], [])
    assert store.owed(OTHER) == ([], ["m_theirs"])


def test_a_memory_is_recallable_only_while_every_source_is_learned(store: StateStore) -> None:
    a = remember(store, "a")
    learn(store, 1, Produced("m1", (a,)))
    b = remember(store, "b")
    attempt = store.begin_attempt(KEY, 2, 10)
    assert attempt is not None
    store.commit_attempt(attempt, [Produced("m2", (b,))])
    assert store.learned_provenance(KEY) == {"m1": [a], "m2": [b]}
    store.forget(KEY, b, sent_at=T0)
    assert store.learned_provenance(KEY) == {"m1": [a]}


def test_ping_answers(store: StateStore) -> None:
    store.ping()
    assert store.counts_by_state()["pending"] == 0


def test_concurrent_remembers_are_each_stored_once(store: StateStore) -> None:
    texts = [f"fact {n}" for n in range(40)]
    start = threading.Barrier(4)
    outcomes: list[str] = []
    guard = threading.Lock()

    def writer() -> None:
        start.wait()
        for text in texts:
            payload = RememberSource(owner_key=KEY, source_id=source_id_for(KEY, text), text=text)
            outcome = store.add_source(payload, sent_at=T0)
            with guard:
                outcomes.append(outcome)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(set(outcomes)) == ["created", "duplicate"]
    assert outcomes.count("created") == len(texts)
    assert store.counts_by_state()["pending"] == len(texts)


def test_remembers_written_together_each_get_the_outcome_one_alone_would(store: StateStore) -> None:
    # The cheap pool writes the remembers its threads hold together
    # (add_new_sources), and asks add_source about the ones not written.
    kept = remember(store, "already here")
    gone = remember(store, "forget me")
    store.forget(KEY, gone, sent_at=T0 + timedelta(seconds=5))
    new, other = (RememberSource(owner_key=k, source_id=source_id_for(k, "new"), text="new") for k in (KEY, OTHER))
    requests = [
        (new, T0),
        (RememberSource(owner_key=KEY, source_id=kept, text="already here"), T0),
        (RememberSource(owner_key=KEY, source_id=gone, text="forget me"), T0 + timedelta(seconds=6)),
        (other, T0),  # another owner, the same id: its own row
        (new, T0),  # the same request twice in one group
    ]
    written = store.add_new_sources(requests)
    assert len(written) == len(requests) and not any(written[i] for i in (1, 2, 4))
    if isinstance(store, SqlStateStore):  # the new ones in one statement (the twin leaves all to add_source)
        assert written == [True, False, False, True, False]
    outcomes = [
        "created" if done else store.add_source(payload, sent_at=sent_at)
        for (payload, sent_at), done in zip(requests, written, strict=True)
    ]
    assert outcomes == ["created", "duplicate", "revived", "created", "duplicate"]
    assert states(store) == {kept: "pending", gone: "pending", new.source_id: "pending"}
    assert states(store, OTHER) == {other.source_id: "pending"}
    assert store.add_new_sources([]) == []


# -- micro-batching's view ------------------------------------------------------------


def test_pending_window_counts_an_owners_pending_sources_and_their_ages(store: StateStore, clock: ManualClock) -> None:
    assert store.pending_window(KEY) == PendingWindow(0, 0, 0)
    remember(store, "first")
    clock.advance(seconds=2)
    remember(store, "second")
    remember(store, "someone else's", key=OTHER)
    clock.advance(milliseconds=500)
    window = store.pending_window(KEY)
    assert window.count == 2
    # Each clock reading adds 1 ms: allow for the readings in between.
    assert 2_500 <= window.oldest_age_ms <= 2_510
    assert 500 <= window.newest_age_ms <= 510


def test_pending_window_ignores_learned_and_forgotten_sources(store: StateStore) -> None:
    remember(store, "learned soon")
    learn(store, 1)
    gone = remember(store, "forgotten soon")
    store.forget(KEY, gone, sent_at=T0 + timedelta(seconds=1))
    assert store.pending_window(KEY).count == 0


def test_newest_token_is_the_floor_of_the_next_one(store: StateStore) -> None:
    assert store.newest_token(KEY) == 0
    remember(store, "a fact")
    learn(store, 7)
    assert store.newest_token(KEY) == 7
    store.close_abandoned(KEY, 9, [])  # recorded even with nothing to close
    assert store.newest_token(KEY) == 9
    assert store.newest_token(OTHER) == 0


def test_pending_window_looks_back_at_the_newest_source_learned_lately(store: StateStore, clock: ManualClock) -> None:
    remember(store, "first of a stream")
    clock.advance(seconds=1)
    remember(store, "second of a stream")
    clock.advance(milliseconds=200)
    learn(store, 1)
    clock.advance(milliseconds=300)
    remember(store, "third of a stream")
    remember(store, "someone else's", key=OTHER)
    clock.advance(milliseconds=100)
    window = store.pending_window(KEY, lookback_ms=10_000)
    assert window.count == 1
    # The second came 600 ms ago (each clock reading adds 1 ms: allow for them).
    assert window.previous_age_ms is not None and 600 <= window.previous_age_ms <= 615
    assert store.pending_window(KEY).previous_age_ms is None  # not asked
    # Learned 400 ms ago: outside a shorter look back.
    assert store.pending_window(KEY, lookback_ms=300).previous_age_ms is None
