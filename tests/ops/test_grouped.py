"""The group commit the cheap pool writes remembers with
(:class:`memjobs_worker.grouped.Grouped`): a call alone runs at once, calls that
come while a batch runs go together in the next, each gets its own outcome."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from memjobs_worker.grouped import Grouped

WAIT_S = 10.0


def until(condition: Callable[[], bool]) -> None:
    """Until ``condition`` holds (an event seen, not a time slept through)."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.001)


class Batches:
    """A batch runner that records each batch and can hold one while it runs."""

    def __init__(self) -> None:
        self.seen: list[list[int]] = []
        self.running = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def __call__(self, items: list[int]) -> list[int | Exception]:
        self.seen.append(items)
        self.running.set()
        assert self.release.wait(WAIT_S)
        return [ValueError(f"odd {i}") if i % 2 else i * 10 for i in items]


def test_a_call_alone_is_a_batch_of_one_run_at_once() -> None:
    batches = Batches()
    grouped = Grouped(batches)
    assert grouped(4) == 40
    with pytest.raises(ValueError, match="odd 3"):
        grouped(3)
    assert batches.seen == [[4], [3]]


def test_calls_that_come_while_a_batch_runs_go_together_in_the_next_each_with_its_own_outcome() -> None:
    batches = Batches()
    batches.release.clear()
    sizes: list[int] = []
    grouped = Grouped(batches, max_batch=4, on_batch=sizes.append)
    outcomes: dict[int, object] = {}

    def call(item: int) -> None:
        try:
            outcomes[item] = grouped(item)
        except ValueError as exc:
            outcomes[item] = str(exc)

    first = threading.Thread(target=call, args=(0,))
    first.start()
    assert batches.running.wait(WAIT_S)  # the first call's batch is running, held
    others = [threading.Thread(target=call, args=(i,)) for i in range(1, 7)]
    for thread in others:
        thread.start()
    until(lambda: grouped.waiting == 6)
    batches.release.set()
    for thread in (first, *others):
        thread.join(WAIT_S)
    # Six waited: the next batch takes four (max_batch), the one after the rest.
    assert batches.seen[0] == [0]
    assert sorted(len(b) for b in batches.seen[1:]) == [2, 4]
    assert sorted(i for b in batches.seen for i in b) == list(range(7))
    assert outcomes == {0: 0, 1: "odd 1", 2: 20, 3: "odd 3", 4: 40, 5: "odd 5", 6: 60}
    assert sizes == [len(b) for b in batches.seen]  # what memjobs_written_together counts


def test_a_batch_that_fails_as_a_whole_fails_each_of_its_calls_and_the_next_runs() -> None:
    broken = True

    def run(items: list[int]) -> list[int | Exception]:
        if broken:
            raise ConnectionError("the ledger did not answer")
        return list[int | Exception](items)

    grouped = Grouped(run)
    with pytest.raises(ConnectionError):
        grouped(1)
    broken = False
    assert grouped(2) == 2
    assert grouped.waiting == 0
