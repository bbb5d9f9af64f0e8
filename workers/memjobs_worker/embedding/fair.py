"""Fair use of one process's model: no owner's embeddings starve another's.

What: :class:`ModelShare` hands out the process's model slots (``slots``
embeddings at once) to *parties* (owners) in turn. A party may have at most
``per_party`` requests open (running or waiting: the next one is refused with
:class:`ModelBusy`, 429 at the HTTP door, for that party alone) and at most one
embedding running, so ``slots - 1`` slots stay free for everyone else while one
owner floods; waiting parties are served round robin, not first come. A
:class:`Claim` is one request's hold: when its request is abandoned (timed
out, disconnected) the claim is abandoned too, and an embedding it has not
started is dropped, never computed for nobody. :class:`BoundedEmbedder` wraps
an embedder: each call takes a turn, and each text is cut to ``max_chars``
characters first (what is sent to a service, what the local model tokenises).

Why: one owner's long queries held the single model lock of the API process
for seconds each; every other owner's recall queued behind them, timed out,
and the abandoned work kept the model busy after the attack stopped (issue 31,
findings 3 and 6; docs/security.md, "Bounded work").

How a request is tied to its turns: the door opens ``share.party(owner, claim)``
around the blocking call in its worker thread; the embedder's calls in that
thread find the claim in a context variable. A worker's job is its owner's
(:class:`OwnerTurns`, a Dramatiq middleware, without admission); other work
(the CLI, ``memjobs reembed``) takes turns as the anonymous party ``""``, which
may use every slot.

Errors: :class:`ModelBusy` (a :class:`~memjobs_client.errors.TransientError`:
retry later) and :class:`Abandoned` (raised in the worker thread only; nobody
reads it).
"""

from __future__ import annotations

import contextvars
import threading
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import dramatiq
from dramatiq.broker import MessageProxy

from memjobs_client.errors import TransientError
from memjobs_worker.embedding.batching import Dropped, QueryBatcher
from memjobs_worker.observability.message import OnJobEnd, message_owner

#: The party of work done outside any request (worker jobs, the CLI).
ANONYMOUS = ""
#: A batch is split over idle slots only in parts of at least this many texts.
MIN_SPLIT = 8
#: Questions at most this long are embedded together with concurrent ones (a
#: batch costs the sum of its texts: a long question runs on its own turn, as
#: before, so it never holds up the short ones of other owners).
BATCHED_QUERY_CHARS = 256


class ModelBusy(TransientError):
    """This owner already has as many embeddings running or waiting as one owner may."""

    reason = "model_busy"


class Abandoned(Exception):
    """The request this work was for is gone: the work was dropped before it started."""


class Claim:
    """One request's hold on model work; :meth:`abandon` when nobody waits for it any more."""

    def __init__(self) -> None:
        self._abandoned = threading.Event()
        self._waiting_on: threading.Condition | None = None
        self._guard = threading.Lock()

    @property
    def abandoned(self) -> bool:
        return self._abandoned.is_set()

    def abandon(self) -> None:
        """Mark the claim abandoned and wake the turn it may be waiting for."""
        self._abandoned.set()
        with self._guard:
            waiting_on = self._waiting_on
        if waiting_on is not None:
            with waiting_on:
                waiting_on.notify_all()

    def _waits_on(self, cond: threading.Condition | None) -> None:
        with self._guard:
            self._waiting_on = cond


class _Hold:
    def __init__(self, party: str, claim: Claim | None) -> None:
        self.party = party
        self.claim = claim


_CURRENT: contextvars.ContextVar[_Hold | None] = contextvars.ContextVar("memjobs_model_hold", default=None)


class ModelShare:
    """The model time of one process, shared among parties.

    Parameters:
        slots: embeddings run at once (the local model is thread-safe; each call
            runs on its own OpenMP threads).
        per_party: requests one party may have open (running or waiting) at once.
    """

    def __init__(self, slots: int = 2, per_party: int = 2) -> None:
        if slots < 1 or per_party < 1:
            raise ValueError("slots and per_party must be at least 1")
        self.slots = slots
        self.per_party = per_party
        self._cond = threading.Condition()
        self._open: Counter[str] = Counter()
        self._running: Counter[str] = Counter()
        self._waiting: dict[str, deque[object]] = {}  # per party, in order of arrival
        self._started = 0
        self._last_start: dict[str, int] = {}  # a party's latest start, while it has turns
        self.dropped = 0  #: turns dropped because their request was abandoned

    @contextmanager
    def party(self, party: str, claim: Claim | None = None) -> Iterator[None]:
        """Admit one request of ``party`` for the block (the embedder's turns in it are its).

        Raises:
            ModelBusy: ``party`` already has :attr:`per_party` requests open.
        """
        with self._cond:
            if self._open[party] >= self.per_party:
                raise ModelBusy(
                    f"this owner already has {self.per_party} embeddings running or "
                    "waiting; retry once they are answered"
                )
            self._open[party] += 1
        token = _CURRENT.set(_Hold(party, claim))
        try:
            yield
        finally:
            _CURRENT.reset(token)
            with self._cond:
                self._open[party] -= 1
                if not self._open[party]:
                    del self._open[party]

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Wait for this thread's party's turn, and hold a slot for the block.

        Raises:
            Abandoned: the request was abandoned before its turn came (nothing ran).
        """
        hold = _CURRENT.get() or _Hold(ANONYMOUS, None)
        me = object()
        claim = hold.claim
        if claim is not None:
            claim._waits_on(self._cond)
        with self._cond:
            self._waiting.setdefault(hold.party, deque()).append(me)
            try:
                while not self._my_turn(hold.party, me):
                    if claim is not None and claim.abandoned:
                        self.dropped += 1
                        raise Abandoned()
                    self._cond.wait()
            finally:
                queue = self._waiting[hold.party]
                queue.remove(me)
                if not queue:
                    del self._waiting[hold.party]
                if claim is not None:
                    claim._waits_on(None)
                self._forget_if_idle(hold.party)
                self._cond.notify_all()  # the first waiting party may be another now
            self._running[hold.party] += 1
            self._started += 1
            self._last_start[hold.party] = self._started
        try:
            yield
        finally:
            with self._cond:
                self._running[hold.party] -= 1
                if not self._running[hold.party]:
                    del self._running[hold.party]
                self._forget_if_idle(hold.party)
                self._cond.notify_all()

    def _forget_if_idle(self, party: str) -> None:
        if party not in self._waiting and not self._running[party]:
            self._last_start.pop(party, None)
            del self._running[party]

    def _my_turn(self, party: str, me: object) -> bool:
        """Whether ``me`` may start: a slot is free, and ``me`` is the first turn of
        the waiting party served least recently among those with nothing running
        (round robin; the anonymous party, a worker's own jobs, may run in every slot)."""
        if sum(self._running.values()) >= self.slots:
            return False
        ready = [p for p in self._waiting if p == ANONYMOUS or not self._running[p]]
        if not ready:
            return False
        first = min(ready, key=lambda p: self._last_start.get(p, 0))  # ties: first arrived
        return first == party and self._waiting[first][0] is me

    def borrow(self, limit: int) -> int:
        """Up to ``limit`` more slots for this thread's party, now, while it holds
        a turn: only slots nobody waits for (no other party's turn is waiting),
        so a large batch of one owner may run on every idle core. Give each back
        with :meth:`give_back` as soon as :meth:`others_waiting` says so. Returns
        how many it got (0: none idle)."""
        party = current_party()
        with self._cond:
            if limit < 1 or self._others_waiting(party):
                return 0
            got = min(limit, self.slots - sum(self._running.values()))
            if got > 0:
                self._running[party] += got
            return max(got, 0)

    def give_back(self, borrowed: int, party: str | None = None) -> None:
        """Return slots :meth:`borrow` lent ``party`` (this thread's by default)."""
        if borrowed <= 0:
            return
        with self._cond:
            self._running[current_party() if party is None else party] -= borrowed
            self._cond.notify_all()

    def others_waiting(self, party: str) -> bool:
        """Whether a party other than ``party`` waits for a turn."""
        with self._cond:
            return self._others_waiting(party)

    def _others_waiting(self, party: str) -> bool:
        return any(p != party for p in self._waiting)

    def open_requests(self, party: str) -> int:
        """Requests of ``party`` open now (for tests and metrics)."""
        with self._cond:
            return self._open[party]


def _never() -> bool:
    return False


def current_claim() -> Claim | None:
    """The claim of the request this thread works for (None outside any, or without one)."""
    hold = _CURRENT.get()
    return hold.claim if hold is not None else None


@contextmanager
def as_anonymous() -> Iterator[None]:
    """Turns taken in the block are the anonymous party's (work for several owners at once)."""
    token = _CURRENT.set(None)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_party() -> str:
    """The party this thread's embeddings are turns of (:data:`ANONYMOUS` outside any)."""
    hold = _CURRENT.get()
    return hold.party if hold is not None else ANONYMOUS


class OwnerTurns(OnJobEnd):
    """Worker middleware: a job's embeddings are its owner's turns on the process's
    model share (the message's ``owner_key``), so one owner's jobs hold at most one
    of the share's slots and another owner's job takes the next free one (no
    admission here: the queue already holds what waits)."""

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        owner = message_owner(message)
        _CURRENT.set(_Hold(owner, None) if owner is not None else None)

    def job_ended(self, message: MessageProxy) -> None:
        _CURRENT.set(None)


class BoundedEmbedder:
    """An embedder whose calls take turns on a :class:`ModelShare`, each text cut
    to ``max_chars`` characters first.

    Parameters:
        inner: an embedder with mem0's shape (``embed``, ``embed_batch``).
        share: the process's model share.
        max_chars: characters of one text passed on (the local model then cuts
            it to its 512-token window; a service gets no more than this).
    """

    def __init__(self, inner: Any, share: ModelShare, max_chars: int, *, batch_queries: bool = False) -> None:
        self.inner = inner
        self.share = share
        self.max_chars = max_chars
        #: Whether a large batch may be split over the share's idle slots (the
        #: local model: one call runs on one core; a service's requests are left whole).
        self.splits = bool(getattr(inner, "splits_batches", False))
        #: Concurrent short questions embedded together (``batch_queries``, the local
        #: model only), in batches spread over the share's slots
        #: (docs/benchmarks.md, "Concurrent recall").
        self.queries: QueryBatcher | None = (
            QueryBatcher(self._query_turn, self._embed_queries, spread=share.slots)
            if batch_queries and getattr(inner, "batches_queries", False)
            else None
        )

    def __getattr__(self, name: str) -> Any:  # model_id, dims, warm, …
        return getattr(self.inner, name)

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        text = text[: self.max_chars]
        if self.queries is not None and memory_action == "search" and len(text) <= BATCHED_QUERY_CHARS:
            claim = current_claim()
            try:
                return self.queries.embed(text, (lambda: claim.abandoned) if claim is not None else _never)
            except Dropped:
                with self.share._cond:
                    self.share.dropped += 1
                raise Abandoned() from None
        with self.share.turn():
            vector: list[float] = self.inner.embed(text, memory_action)
            return vector

    def embed_batch(self, texts: Sequence[str], memory_action: str | None = None) -> list[list[float]]:
        cut = [t[: self.max_chars] for t in texts]
        with self.share.turn():
            if not self.splits or len(cut) < 2 * MIN_SPLIT:
                vectors: list[list[float]] = self.inner.embed_batch(cut, memory_action)
                return vectors
            return self._split(cut, memory_action)

    def _split(self, texts: list[str], memory_action: str | None) -> list[list[float]]:
        """One batch in parts of :data:`MIN_SPLIT` texts, run by this thread (on
        its turn's slot) and by helper threads on the idle slots it can borrow
        (the model's C engine releases the GIL). A helper gives its slot back
        as soon as another owner waits for one, so a waiting owner waits for
        one part at most, never for the whole batch. The vectors come in order;
        a part that fails fails the call."""
        parts = [texts[i : i + MIN_SPLIT] for i in range(0, len(texts), MIN_SPLIT)]
        results: list[list[list[float]] | None] = [None] * len(parts)
        failures: list[BaseException] = []
        taken = iter(range(len(parts)))
        lock = threading.Lock()
        party = current_party()

        def work(helper: bool) -> None:
            while True:
                with lock:
                    i = None if failures else next(taken, None)
                if i is None:
                    return
                try:
                    results[i] = self.inner.embed_batch(parts[i], memory_action)
                except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread below
                    with lock:
                        failures.append(exc)
                    return
                if helper and self.share.others_waiting(party):
                    return

        def helper() -> None:
            try:
                work(True)
            finally:
                self.share.give_back(1, party)

        borrowed = self.share.borrow(min(len(parts), self.share.slots) - 1)
        helpers = [threading.Thread(target=helper, daemon=True, name="memjobs-embed-part") for _ in range(borrowed)]
        for thread in helpers:
            thread.start()
        work(False)
        for thread in helpers:
            thread.join()
        if failures:
            raise failures[0]
        out: list[list[float]] = []
        for result in results:
            assert result is not None
            out += result
        return out

    @contextmanager
    def _query_turn(self) -> Iterator[None]:
        """A batch of questions' turn: the anonymous party's (it serves several owners)."""
        with as_anonymous(), self.share.turn():
            yield

    def _embed_queries(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = self.inner.embed_batch(texts, "search")
        return vectors
