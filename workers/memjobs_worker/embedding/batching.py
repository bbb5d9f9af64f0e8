"""Concurrent questions embedded in one model call: a micro-batcher.

What: :class:`QueryBatcher` lets the threads of one process that each need one
text embedded share a call. The first caller becomes the *leader*: it waits
for a model turn (``turn``), and every caller that arrives meanwhile joins its
batch; when the turn comes the leader takes up to ``max_batch`` waiting texts,
embeds them in one call (``embed``) and hands each caller its own vector. A
caller that arrives once the leader has taken its batch leads the next one.
A batch takes its share of those waiting, as if they were spread over
``spread`` calls (the process's slots): with two slots, six waiting questions
run as three on the slot that frees first, two on the next and the last on
whichever frees then, never six on one slot while the other idles (all six
callers waiting for the whole six).
Optionally the leader first waits ``window_s`` for company (0 by default: the
wait for a turn already gathers the callers that come while the model is busy,
and a lone caller pays nothing).

Why: the local model's C engine streams each weight once for a whole batch,
so a question costs less in a batch (7.3 ms of CPU alone, 6.2 in a batch of
three, 5.8 in one of eight, measured on this 2-core machine), and concurrent
recalls no longer queue for the process's slots one question at a time
(issue 36, item 4; figures in docs/benchmarks.md).

Never loses or mixes up a caller: each caller's vector is the one at its own
text's position in its batch's answer; when the batch call fails, each text of
it is embedded again alone in the same turn, so only a caller whose own text
fails gets an error (its own); a caller whose request is gone (``gone()`` true
when its batch is taken) is dropped with :class:`Dropped`, never computed.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

Vector = list[float]


class Dropped(Exception):
    """The caller's request was gone before its batch started: its text was not embedded."""


class _Waiter:
    __slots__ = ("text", "gone", "vector", "error", "done", "leads")

    def __init__(self, text: str, gone: Callable[[], bool]) -> None:
        self.text = text
        self.gone = gone
        self.vector: Vector | None = None
        self.error: BaseException | None = None
        self.done = False
        self.leads = False


def _never() -> bool:
    return False


class QueryBatcher:
    """Batches concurrent single-text embeddings into calls of ``embed``.

    Parameters:
        turn: a model turn, held around each batch's call (e.g. a slot of the
            process's :class:`~memjobs_worker.embedding.fair.ModelShare`).
        embed: texts in, one vector per text out, in order.
        max_batch: texts in one call at most.
        window_s: how long a leader waits for company before it asks for its turn.
        spread: a leader takes ``ceil(waiting / spread)`` of the texts waiting
            (at most ``max_batch``).
    """

    def __init__(
        self,
        turn: Callable[[], AbstractContextManager[Any]],
        embed: Callable[[list[str]], list[Vector]],
        *,
        max_batch: int = 16,
        window_s: float = 0.0,
        spread: int = 1,
    ) -> None:
        if max_batch < 1 or spread < 1:
            raise ValueError("max_batch and spread must be at least 1")
        self.turn = turn
        self.embed_texts = embed
        self.max_batch = max_batch
        self.window_s = window_s
        self.spread = spread
        self._cond = threading.Condition()
        self._queue: deque[_Waiter] = deque()
        self._leading = False  # a leader is gathering (before it takes its batch)
        self.calls = 0  #: model calls made (batches and single retries), for tests and figures
        self.dropped = 0  #: callers dropped because their request was gone

    def embed(self, text: str, gone: Callable[[], bool] = _never) -> Vector:
        """``text``'s vector, embedded with whatever other callers' texts wait with it.

        Raises:
            Dropped: ``gone()`` was true when the batch was taken.
            Exception: whatever ``embed`` raised for this text alone.
        """
        me = _Waiter(text, gone)
        with self._cond:
            self._queue.append(me)
            if not self._leading:
                self._leading = me.leads = True
            self._cond.notify_all()  # a leader's window may end now (and tests see the queue)
            while not me.leads and not me.done:
                self._cond.wait()
        if not me.done:
            self._lead()
        if me.error is not None:
            raise me.error
        assert me.vector is not None
        return me.vector

    def wait_for_waiting(self, count: int, timeout_s: float) -> bool:
        """Block until ``count`` callers wait for a batch (for tests); whether they did."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._queue) >= count, timeout_s)

    def _lead(self) -> None:
        if self.window_s > 0:
            with self._cond:
                self._cond.wait_for(lambda: len(self._queue) >= self.max_batch, timeout=self.window_s)
        batch: list[_Waiter] = []
        try:
            with self.turn():
                with self._cond:
                    size = min(self.max_batch, -(-len(self._queue) // self.spread))
                    while self._queue and len(batch) < size:
                        batch.append(self._queue.popleft())
                    # The next caller leads the next batch; one already waiting leads it now.
                    self._leading = bool(self._queue)
                    if self._queue:
                        self._queue[0].leads = True
                    self._cond.notify_all()
                self._run(batch)
        except BaseException as exc:  # the turn itself failed: every caller taken hears why
            for waiter in batch:
                if not waiter.done:
                    waiter.error = exc
            if not batch:  # nothing taken: hand the lead on, and fail this caller alone
                with self._cond:
                    me = self._queue.popleft() if self._queue and self._queue[0].leads else None
                    if me is not None:
                        me.error = exc
                        batch.append(me)
                    self._leading = bool(self._queue)
                    if self._queue:
                        self._queue[0].leads = True
        finally:
            with self._cond:
                for waiter in batch:
                    waiter.done = True
                self._cond.notify_all()

    def _run(self, batch: list[_Waiter]) -> None:
        live = []
        for waiter in batch:
            if waiter.gone():
                waiter.error = Dropped()
                self.dropped += 1
            else:
                live.append(waiter)
        if not live:
            return
        try:
            self.calls += 1
            vectors = self.embed_texts([w.text for w in live])
            if len(vectors) != len(live):
                raise ValueError(f"{len(vectors)} vectors for {len(live)} texts")
        except Exception:
            if len(live) == 1:
                raise
            for waiter in live:  # each alone: only a text that fails by itself fails its caller
                try:
                    self.calls += 1
                    waiter.vector = self.embed_texts([waiter.text])[0]
                except Exception as exc:  # noqa: BLE001 - handed to its own caller
                    waiter.error = exc
            return
        for waiter, vector in zip(live, vectors, strict=True):
            waiter.vector = vector
