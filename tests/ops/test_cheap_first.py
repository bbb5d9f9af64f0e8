"""Remember first in a process whose pools share it
(:meth:`memjobs_worker.pools.SharedWorker.cheap_first`): an extraction's next
batch waits while the cheap pool has work, and no longer than its bound."""

from __future__ import annotations

import threading
from queue import Queue
from typing import Any

from dramatiq.brokers.stub import StubBroker

from memjobs_client.contracts import CHEAP_QUEUES, MODEL_QUEUES
from memjobs_worker.pools import SharedWorker

WAIT_S = 10.0


def shared(pools: list[tuple[tuple[str, ...], int]]) -> SharedWorker:
    broker = StubBroker()
    for queue in (*MODEL_QUEUES, *CHEAP_QUEUES):
        broker.declare_queue(queue)
    return SharedWorker(broker, pools)


def in_hand(work: Queue[Any], what: str) -> None:
    """A message in the pool's hands: put on its work queue, not done."""
    work.put((0, what))


def gone(wait: Any, went: threading.Event) -> threading.Thread:
    """A batch about to start, in a thread of its own: ``went`` set once its wait is over."""

    def batch() -> None:
        wait()
        went.set()

    thread = threading.Thread(target=batch)
    thread.start()
    return thread


def test_a_batch_waits_while_the_cheap_pool_has_work_and_goes_once_it_is_done() -> None:
    worker = shared([(tuple(MODEL_QUEUES), 2), (tuple(CHEAP_QUEUES), 4)])
    wait = worker.cheap_first(60_000)
    [_, cheap] = worker.pools
    in_hand(cheap.work_queue, "a remember")
    went = threading.Event()
    batch = gone(wait, went)
    assert not went.wait(0.2)  # held back (a minute's bound: only the done remember lets it go)
    cheap.work_queue.get()
    cheap.work_queue.task_done()
    assert went.wait(WAIT_S)
    batch.join(WAIT_S)
    wait()  # nothing in hand: at once


def test_a_flood_of_remembers_holds_a_batch_back_no_longer_than_the_bound() -> None:
    worker = shared([(tuple(MODEL_QUEUES), 2), (tuple(CHEAP_QUEUES), 4)])
    [_, cheap] = worker.pools
    in_hand(cheap.work_queue, "a remember that is never done")
    went = threading.Event()
    batch = gone(worker.cheap_first(50), went)
    assert went.wait(WAIT_S)  # its bound (50 ms) passed, the remember still in hand
    batch.join(WAIT_S)


def test_no_wait_without_a_cheap_pool_of_its_own_or_with_a_bound_of_zero() -> None:
    one = shared([((*MODEL_QUEUES, *CHEAP_QUEUES), 4)])
    [pool] = one.pools
    in_hand(pool.work_queue, "a job")
    one.cheap_first(60_000)()  # one pool takes everything: its own batch would wait on itself
    two = shared([(tuple(MODEL_QUEUES), 2), (tuple(CHEAP_QUEUES), 4)])
    in_hand(two.pools[1].work_queue, "a remember")
    two.cheap_first(0)()
