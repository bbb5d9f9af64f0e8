"""Calls from many threads written together: a group commit.

Each of the cheap pool's threads takes one ``remember_source`` at a time, and
each would pay its own round trip to the ledger and its own to Redis.
:class:`Grouped` runs the calls that arrive while a batch is being written as
the next batch, in one go: under load a batch grows to the number of threads
waiting, and a call that finds nobody writing is written at once, alone (no
timer, no wait added). Each call gets its own item's outcome or error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class _Slot(Generic[T, R]):
    __slots__ = ("done", "item", "outcome", "wake")

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = False
        self.outcome: R | BaseException | None = None
        #: Held while the call waits; released (once) when its batch is done,
        #: or when it is its turn to run the next batch.
        self.wake = threading.Lock()
        self.wake.acquire()


class Grouped(Generic[T, R]):
    """``grouped(item)`` runs ``run`` on a batch holding ``item`` and returns
    its outcome (raises its error): the caller that finds no batch running
    runs one; the calls that come meanwhile wait, and when it is done the
    first of them runs the next batch, of every call waiting (up to
    ``max_batch``). Each waiting call is woken once, by its own lock: no
    thundering herd however many threads wait.

    Parameters:
        run: the items of a batch → each one's outcome, or the exception that
            item's call raises. An exception ``run`` raises is every item's.
        max_batch: the most items a batch takes.
        on_batch: told each batch's size before it runs (a metric).
    """

    def __init__(
        self,
        run: Callable[[list[T]], Sequence[R | Exception]],
        *,
        max_batch: int = 64,
        on_batch: Callable[[int], None] = lambda size: None,
    ) -> None:
        self._run = run
        self._max = max_batch
        self._on_batch = on_batch
        self._lock = threading.Lock()
        self._waiting: list[_Slot[T, R]] = []
        self._running = False  # a batch is running, or its next runner is woken

    @property
    def waiting(self) -> int:
        """How many calls wait for a batch to take them."""
        with self._lock:
            return len(self._waiting)

    def __call__(self, item: T) -> R:
        slot: _Slot[T, R] = _Slot(item)
        with self._lock:
            self._waiting.append(slot)
            runs, self._running = not self._running, True
        if not runs:
            slot.wake.acquire()  # done, or this call's turn to run the next batch
        if not slot.done:
            self._run_next()  # (its slot is the first waiting: the batch takes it)
        if isinstance(slot.outcome, BaseException):
            raise slot.outcome
        return slot.outcome  # type: ignore[return-value]  # done: the item's outcome

    def _run_next(self) -> None:
        """Run the waiting calls' next batch, wake them, and hand the turn on."""
        with self._lock:
            batch = self._waiting[: self._max]
            del self._waiting[: self._max]
        try:
            self._settle(batch)
        finally:
            with self._lock:
                after = self._waiting[0] if self._waiting else None
                self._running = after is not None
            if after is not None:  # first: the next batch starts while these wake
                after.wake.release()
            for slot in batch[1:]:  # (the first is this call's own)
                slot.wake.release()

    def _settle(self, batch: list[_Slot[T, R]]) -> None:
        try:
            self._on_batch(len(batch))
            outcomes: Sequence[R | BaseException] = self._run([slot.item for slot in batch])
        except BaseException as exc:  # noqa: BLE001 - every item's, raised in each caller (a time limit too)
            outcomes = [exc] * len(batch)
        for slot, outcome in zip(batch, outcomes, strict=True):
            slot.outcome = outcome
            slot.done = True
