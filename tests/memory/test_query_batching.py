"""Concurrent questions share one model call (issue 36, item 4), and a large
learning batch runs on every idle slot (issue 32, item 2), without losing or
mixing up a caller: each gets its own text's vector, a text that fails fails
its own caller only, an abandoned caller is dropped, never computed."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from memjobs_worker.embedding import build_embedder
from memjobs_worker.embedding.fair import (
    ANONYMOUS,
    Abandoned,
    BoundedEmbedder,
    Claim,
    ModelShare,
    current_party,
)
from memjobs_worker.embedding.hashing import HashingEmbedder
from memjobs_worker.embedding.local import LocalEmbedder
from memjobs_worker.settings import EmbeddingSettings, ModelSettings

WAIT_S = 30  # a generous bound on an event that follows at once
QUESTIONS = [
    "what am I allergic to?",
    "我对什么过敏？",
    "when does my son play football?",
    "where do I live?",
    "what car do I drive?",
    "我的血型是什么？",
    "did I play in a band?",
    "which temple do we visit in Hangzhou?",
]


class Recording:
    """The hashed embedder (a distinct vector per text), recording each call and
    failing any call that holds a text in ``poison``; as the local model does,
    it lets its batches be split and its questions batched."""

    splits_batches = True
    batches_queries = True

    def __init__(self, poison: set[str] | None = None) -> None:
        self.inner = HashingEmbedder(64)
        self.poison = poison or set()
        self.calls: list[list[str]] = []
        self.lock = threading.Lock()

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        return self.embed_batch([text], memory_action)[0]

    def embed_batch(self, texts: list[str], memory_action: str | None = None) -> list[list[float]]:
        with self.lock:
            self.calls.append(list(texts))
        if self.poison & set(texts):
            raise ValueError("this text cannot be embedded")
        return [self.inner.embed(t, memory_action) for t in texts]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (
        math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    )


@pytest.fixture
def blocked() -> Iterator[tuple[ModelShare, threading.Event]]:
    """A share of one slot, held until the event is set: callers queue meanwhile."""
    share, release, holding = ModelShare(slots=1, per_party=2), threading.Event(), threading.Event()

    def hold() -> None:
        with share.turn():
            holding.set()
            release.wait(WAIT_S)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert holding.wait(WAIT_S)
    yield share, release
    release.set()
    holder.join(WAIT_S)


def ask_all(
    embedder: BoundedEmbedder, texts: list[str], release: threading.Event, claims: dict[str, Claim] | None = None
) -> dict[str, Any]:
    """Each text asked by a thread of its own (as its own owner) while the slot is
    held; the slot let go once all of them wait; each caller's answer or error."""
    answers: dict[str, Any] = {}

    def ask(text: str) -> None:
        try:
            with embedder.share.party(f"owner-{text}", (claims or {}).get(text)):
                answers[text] = embedder.embed(text, "search")
        except Exception as exc:  # noqa: BLE001 - the caller's own error, for the test to read
            answers[text] = exc

    callers = [threading.Thread(target=ask, args=(t,), daemon=True) for t in texts]
    for caller in callers:
        caller.start()
    assert embedder.queries is not None and embedder.queries.wait_for_waiting(len(texts), WAIT_S)
    release.set()
    for caller in callers:
        caller.join(WAIT_S)
    assert len(answers) == len(texts)
    return answers


def test_concurrent_questions_to_the_local_model_share_one_call_and_each_gets_its_own_vector(
    blocked: tuple[ModelShare, threading.Event],
) -> None:
    share, release = blocked
    model = LocalEmbedder()
    alone = {q: model.embed(q, "search") for q in QUESTIONS}  # one call each
    embedder = BoundedEmbedder(model, share, max_chars=8192, batch_queries=True)
    answers = ask_all(embedder, QUESTIONS, release)
    assert embedder.queries is not None and embedder.queries.calls == 1  # all eight in one call
    for question in QUESTIONS:
        assert cosine(answers[question], alone[question]) >= 0.999, question
        others = [cosine(answers[question], alone[q]) for q in QUESTIONS if q != question]
        assert max(others) < 0.999  # not another caller's vector


def test_a_text_that_fails_fails_its_own_caller_only(blocked: tuple[ModelShare, threading.Event]) -> None:
    share, release = blocked
    model = Recording(poison={"poison"})
    embedder = BoundedEmbedder(model, share, max_chars=100, batch_queries=True)
    answers = ask_all(embedder, [*QUESTIONS[:5], "poison"], release)
    assert isinstance(answers["poison"], ValueError)
    for question in QUESTIONS[:5]:
        assert answers[question] == model.inner.embed(question, "search")
    assert len(model.calls[0]) == 6  # the batch was tried whole first, then each text alone
    assert sorted(map(tuple, model.calls[1:])) == sorted((t,) for t in [*QUESTIONS[:5], "poison"])


def test_an_abandoned_caller_is_dropped_before_its_batch_and_the_others_are_answered(
    blocked: tuple[ModelShare, threading.Event],
) -> None:
    share, release = blocked
    model = Recording()
    embedder = BoundedEmbedder(model, share, max_chars=100, batch_queries=True)
    gone = Claim()
    gone.abandon()
    answers = ask_all(embedder, QUESTIONS[:4], release, claims={QUESTIONS[0]: gone})
    assert isinstance(answers[QUESTIONS[0]], Abandoned)
    assert model.calls == [QUESTIONS[1:4]] or sorted(model.calls[0]) == sorted(QUESTIONS[1:4])
    assert all(answers[q] == model.inner.embed(q, "search") for q in QUESTIONS[1:4])
    assert share.dropped == 1


def test_more_callers_than_a_batch_holds_are_all_answered_in_several_batches(
    blocked: tuple[ModelShare, threading.Event],
) -> None:
    share, release = blocked
    model = Recording()
    embedder = BoundedEmbedder(model, share, max_chars=100, batch_queries=True)
    assert embedder.queries is not None
    embedder.queries.max_batch = 3
    texts = [f"question {i}" for i in range(8)]
    answers = ask_all(embedder, texts, release)
    assert all(answers[t] == model.inner.embed(t, "search") for t in texts)
    assert max(map(len, model.calls)) <= 3 and sorted(sum(model.calls, [])) == sorted(texts)


def test_questions_waiting_for_two_slots_are_spread_over_both_in_fewer_calls() -> None:
    """Both slots busy, six questions wait: the first slot to free takes three, the
    next two, the last one the one left (not six on one slot while the other idles);
    each caller gets its own text's vector."""
    share, release = ModelShare(slots=2, per_party=2), threading.Event()
    holding = threading.Barrier(3)

    def hold() -> None:
        with share.turn():
            holding.wait(WAIT_S)
            release.wait(WAIT_S)

    holders = [threading.Thread(target=hold, daemon=True) for _ in range(2)]
    for holder in holders:
        holder.start()
    holding.wait(WAIT_S)
    model = Recording()
    embedder = BoundedEmbedder(model, share, max_chars=100, batch_queries=True)
    answers = ask_all(embedder, QUESTIONS[:6], release)
    assert all(answers[q] == model.inner.embed(q, "search") for q in QUESTIONS[:6])
    assert sorted(map(len, model.calls)) == [1, 2, 3]
    assert sorted(sum(model.calls, [])) == sorted(QUESTIONS[:6])
    for holder in holders:
        holder.join(WAIT_S)


def test_questions_are_batched_unless_the_setting_says_not() -> None:
    built = build_embedder(ModelSettings(), EmbeddingSettings(local_embedder="e5"))
    assert built.queries is not None and built.queries.spread == built.share.slots == 2
    assert build_embedder(ModelSettings(), EmbeddingSettings(local_embedder="e5", batch_queries=False)).queries is None


def test_a_long_question_and_a_passage_take_turns_of_their_own() -> None:
    model = Recording()
    embedder = BoundedEmbedder(model, ModelShare(slots=2), max_chars=100_000, batch_queries=True)
    long_question = "why " * 300
    assert embedder.embed(long_question, "search") == model.inner.embed(long_question, "search")
    assert embedder.embed("a passage", "add") == model.inner.embed("a passage", "add")
    assert embedder.queries is not None and embedder.queries.calls == 0


def test_a_large_batch_is_split_over_idle_slots_in_order() -> None:
    model = Recording()
    embedder = BoundedEmbedder(model, ModelShare(slots=2), max_chars=100)
    texts = [f"turn {i}" for i in range(40)]
    assert embedder.embed_batch(texts, "add") == [model.inner.embed(t, "add") for t in texts]
    assert sorted(map(len, model.calls)) == [8] * 5 and sorted(sum(model.calls, [])) == sorted(texts)


class GatedParts(Recording):
    """Each call announces itself, then waits until it is let go (by its number)."""

    def __init__(self) -> None:
        super().__init__()
        self.cond = threading.Condition()
        self.released: set[int] = set()

    def embed_batch(self, texts: list[str], memory_action: str | None = None) -> list[list[float]]:
        with self.cond:
            number = len(self.calls)
            self.calls.append(list(texts))
            self.cond.notify_all()
            assert self.cond.wait_for(lambda: number in self.released, WAIT_S)
        return [self.inner.embed(t, memory_action) for t in texts]

    def wait_calls(self, count: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.calls) >= count, WAIT_S)

    def release(self, *numbers: int) -> None:
        with self.cond:
            self.released.update(numbers)
            self.cond.notify_all()


def test_a_borrowed_slot_goes_back_after_one_part_when_another_owner_waits() -> None:
    share, model = ModelShare(slots=2, per_party=2), GatedParts()
    embedder = BoundedEmbedder(model, share, max_chars=100)
    texts = [f"turn {i}" for i in range(40)]
    learned: list[list[list[float]]] = []

    def learner() -> None:
        with share.party("learner"):
            learned.append(embedder.embed_batch(texts, "add"))

    def victim() -> None:
        with share.party("victim"):
            embedder.embed_batch(["the victim's source"], "add")

    first = threading.Thread(target=learner, daemon=True)
    first.start()
    model.wait_calls(2)  # two parts at once: the learner's slot and the idle one
    second = threading.Thread(target=victim, daemon=True)
    second.start()
    with share._cond:
        assert share._cond.wait_for(lambda: "victim" in share._waiting, WAIT_S)
    model.release(0, 1)
    model.wait_calls(4)  # the next two: one more part of the learner's, and the victim's
    assert ["the victim's source"] in model.calls[2:4]
    model.release(*range(10))
    first.join(WAIT_S)
    second.join(WAIT_S)
    assert learned == [[model.inner.embed(t, "add") for t in texts]]
    assert share.borrow(2) == 2  # every slot free again
    share.give_back(2)


def test_a_split_batch_of_the_local_model_matches_the_whole_batch() -> None:
    model = LocalEmbedder()
    texts = [f"[8 May 2023] Caroline: I went to the support group on day {i} and it helped." for i in range(16)]
    whole = model.embed_batch(texts, "add")
    split = BoundedEmbedder(model, ModelShare(slots=2), max_chars=8192).embed_batch(texts, "add")
    assert all(cosine(a, b) >= 0.999 for a, b in zip(whole, split, strict=True))


def test_a_failing_part_of_a_split_batch_fails_the_call() -> None:
    model = Recording(poison={"turn 39"})
    embedder = BoundedEmbedder(model, ModelShare(slots=2), max_chars=100)
    with pytest.raises(ValueError, match="cannot be embedded"):
        embedder.embed_batch([f"turn {i}" for i in range(40)], "add")
    assert embedder.share.borrow(1) == 1  # the borrowed slot was given back
    embedder.share.give_back(1)


def test_no_slot_is_borrowed_while_another_owner_waits() -> None:
    share = ModelShare(slots=3, per_party=2)
    started, release = threading.Event(), threading.Event()

    def other_owner(first: bool) -> None:
        with share.party("other"), share.turn():
            if first:
                started.set()
                release.wait(WAIT_S)

    with share.party("learner"), share.turn():
        first = threading.Thread(target=other_owner, args=(True,), daemon=True)
        first.start()
        assert started.wait(WAIT_S)
        second = threading.Thread(target=other_owner, args=(False,), daemon=True)
        second.start()  # waits: one embedding at a time per owner
        with share._cond:
            assert share._cond.wait_for(lambda: "other" in share._waiting, WAIT_S)
        assert share.borrow(2) == 0  # a slot is free, but an owner waits for one
        release.set()
        first.join(WAIT_S)
        second.join(WAIT_S)
        assert share.borrow(2) == 2  # nobody waits: every idle slot
        share.give_back(2)
    assert current_party() == ANONYMOUS and share.borrow(1) == 1
    share.give_back(1)
