"""Remember first in a process whose pools share it
(:meth:`memjobs_worker.pools.SharedWorker.cheap_first`): an extraction's next
batch waits while the cheap pool has work, and no longer than its bound."""

from __future__ import annotations

import threading

from dramatiq.brokers.stub import StubBroker

from memjobs_client.contracts import CHEAP_QUEUES, MODEL_QUEUES
from memjobs_worker.pools import SharedWorker

WAIT_S = 10.0


def shared(pools: list[tuple[tuple[str, ...], int]]) -> SharedWorker:
    broker = StubBroker()
    for queue in (*MODEL_QUEUES, *CHEAP_QUEUES):
        broker.declare_queue(queue)
    return SharedWorker(broker, pools)


def test_a_batch_waits_while_the_cheap_pool_has_work_and_goes_once_it_is_done() -> None:
    worker = shared([(tuple(MODEL_QUEUES), 2), (tuple(CHEAP_QUEUES), 4)])
    wait = worker.cheap_first(60_000)
    [_, cheap] = worker.pools
    cheap.work_queue.put((0, "a remember"))  # in the cheap pool's hands: not done
    went = threading.Event()
    batch = threading.Thread(target=lambda: (wait(), went.set()))
    batch.start()
    assert not went.wait(0.2)  # held back (a minute's bound: only the done remember lets it go)
    cheap.work_queue.get()
    cheap.work_queue.task_done()
    assert went.wait(WAIT_S)
    batch.join(WAIT_S)
    wait()  # nothing in hand: at once


def test_a_flood_of_remembers_holds_a_batch_back_no_longer_than_the_bound() -> None:
    worker = shared([(tuple(MODEL_QUEUES), 2), (tuple(CHEAP_QUEUES), 4)])
    [_, cheap] = worker.pools
    cheap.work_queue.put((0, "a remember that is never done"))
    went = threading.Event()
    batch = threading.Thread(target=lambda: (worker.cheap_first(50)(), went.set()))
    batch.start()
    assert went.wait(WAIT_S)  # its bound (50 ms) passed, the remember still in hand
    batch.join(WAIT_S)


def test_no_wait_without_a_cheap_pool_of_its_own_or_with_a_bound_of_zero() -> None:
    one = shared([((*MODEL_QUEUES, *CHEAP_QUEUES), 4)])
    [pool] = one.pools
    pool.work_queue.put((0, "a job"))
    one.cheap_first(60_000)()  # one pool takes everything: its own batch would wait on itself
    two = shared([(tuple(MODEL_QUEUES), 2), (tuple(CHEAP_QUEUES), 4)])
    two.pools[1].work_queue.put((0, "a remember"))
    two.cheap_first(0)()
