"""The worker pools of one host, and the small runner that keeps them together.

A host runs two Dramatiq process groups: the jobs that call a model
(extraction, session end, reindexing) in one, and the cheap jobs (remember,
forget, task status) in a pool of their own
(``MEMJOBS_FAST_WORKER_PROCESSES`` × ``MEMJOBS_FAST_WORKER_THREADS``), so that
a remembered source reaches the ledger in milliseconds however long the
extractions take: Dramatiq's threads serve every queue a process consumes, and
its prefetch would otherwise hold remember messages behind a long extraction.

``python -m memjobs_worker`` without ``--queues`` is :func:`run_pools`: it
starts each pool as ``python -m memjobs_worker --queues …``, forwards the stop
signals to them, and exits when they have all stopped (or stops them all when
one dies, so the host's supervisor restarts the whole set).

On a small host (:func:`shares_process`: one process per pool asked for, and
at most :data:`SMALL_HOST_CORES` cores or :data:`SMALL_HOST_MEMORY` of memory;
``MEMJOBS_WORKER_LAYOUT`` forces either way) the pools share one process
instead: a :class:`SharedWorker`, one Dramatiq worker per pool, each with its
own consumers, prefetch and threads, so the isolation above holds while the
interpreter, the imports, mem0 and the embedding model are there once (six
processes become one: 500 MB of RSS become 130-190, docs/benchmarks.md). More hosts
scale the same process out: each consumes every queue, pool by pool.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dramatiq

from memjobs_client.contracts import CHEAP_QUEUES, MODEL_QUEUES, QUEUE_KNOWLEDGE
from memjobs_worker.settings import WorkerSettings

#: Signals a runner passes on to its pools.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def worker_command(processes: int, threads: int, queues: Sequence[str] = ()) -> list[str]:
    """The command line of memjobs' workers (Dramatiq with memjobs' logging):
    every pool of the host, or one pool on ``queues``."""
    command = [sys.executable, "-m", "memjobs_worker", "--processes", str(processes), "--threads", str(threads)]
    return [*command, "--queues", *queues] if queues else command


@dataclass(frozen=True)
class WorkerPool:
    """One Dramatiq process group: its command line and what its environment adds."""

    command: list[str]
    env: dict[str, str] = field(default_factory=dict)


#: A host with at most this many cores, or this much memory, runs its pools in
#: one process (when one process per pool is asked for).
SMALL_HOST_CORES = 4
SMALL_HOST_MEMORY = 8 * 2**30


def host_size() -> tuple[int, int]:
    """This host's cores (those this process may run on) and memory in bytes."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def shares_process(workers: WorkerSettings, processes: int) -> bool:
    """Whether this host's pools run in one process (:class:`SharedWorker`):
    as ``MEMJOBS_WORKER_LAYOUT`` says, or, left at ``auto``, when each pool is
    to have one process and the host is small (see the module)."""
    if workers.worker_layout != "auto":
        return workers.worker_layout == "shared"
    if processes != 1 or workers.fast_worker_processes > 1:
        return False
    cores, memory = host_size()
    return cores <= SMALL_HOST_CORES or memory <= SMALL_HOST_MEMORY


def pool_queues(workers: WorkerSettings, threads: int, *, knowledge_on: bool) -> list[tuple[tuple[str, ...], int]]:
    """Each pool's queues and threads: the jobs that call a model on ``threads``,
    the cheap jobs on ``MEMJOBS_FAST_WORKER_THREADS`` when the settings give them
    a pool (``MEMJOBS_FAST_WORKER_PROCESSES`` > 0; else one pool takes everything).
    Knowledge is opt-in: without ``knowledge_on``, no pool consumes its queue."""
    model_queues = tuple(q for q in MODEL_QUEUES if knowledge_on or q != QUEUE_KNOWLEDGE)
    if workers.fast_worker_processes == 0:
        return [((*model_queues, *CHEAP_QUEUES), threads)]
    return [(model_queues, threads), (tuple(CHEAP_QUEUES), workers.fast_worker_threads)]


def worker_pools(workers: WorkerSettings, processes: int, threads: int, *, knowledge_on: bool) -> list[WorkerPool]:
    """Every pool a worker host runs in processes of its own: ``processes`` ×
    ``threads`` for the jobs that call a model (it serves the host's metrics),
    and the cheap jobs' own pool when the settings give it processes (else one
    pool takes everything)."""
    # Each pool's processes size their database pools by their own thread count.
    sized = {"MEMJOBS_WORKER_PROCESSES": str(processes), "MEMJOBS_WORKER_THREADS": str(threads)}
    pools = pool_queues(workers, threads, knowledge_on=knowledge_on)
    if len(pools) == 1:
        return [WorkerPool(worker_command(processes, threads, pools[0][0]), sized)]
    (model_queues, _), (cheap_queues, cheap_threads) = pools
    return [
        WorkerPool(worker_command(processes, threads, model_queues), sized),
        WorkerPool(
            worker_command(workers.fast_worker_processes, cheap_threads, cheap_queues),
            {"MEMJOBS_METRICS_ENDPOINT": "false"},
        ),
    ]


class _PoolBroker:
    """The broker as one pool of a :class:`SharedWorker` sees it: the worker's
    boot and shutdown are the shared worker's to announce, once (the
    middleware's heartbeat, flusher and stats threads are one per process);
    every other call and hook goes to the broker itself."""

    _OWN = ("worker_boot", "worker_shutdown")

    def __init__(self, broker: dramatiq.Broker) -> None:
        self._broker = broker

    def __getattr__(self, name: str) -> Any:
        return getattr(self._broker, name)

    def emit_before(self, signal_name: str, *args: Any, **kwargs: Any) -> None:
        if signal_name not in self._OWN:
            self._broker.emit_before(signal_name, *args, **kwargs)

    def emit_after(self, signal_name: str, *args: Any, **kwargs: Any) -> None:
        if signal_name not in self._OWN:
            self._broker.emit_after(signal_name, *args, **kwargs)


class SharedWorker(dramatiq.Worker):
    """Several pools in one process: one Dramatiq worker per pool (its own
    consumers, prefetch sized by its own threads, work queue and threads), so a
    long extraction holds no remember message, as in a process of its own.
    To the middleware it is one worker consuming every pool's queues.

    Parameters:
        broker: the process's broker.
        pools: each pool's queues and threads (:func:`pool_queues`).
    """

    def __init__(self, broker: dramatiq.Broker, pools: Sequence[tuple[Sequence[str], int]]) -> None:
        super().__init__(
            broker,
            queues={q for queues, _ in pools for q in queues},
            worker_threads=sum(threads for _, threads in pools),
        )
        seen = _PoolBroker(broker)
        self.pools = [
            dramatiq.Worker(seen, queues=set(queues), worker_threads=threads)  # type: ignore[arg-type]
            for queues, threads in pools
        ]

    def cheap_first(self, max_wait_ms: int) -> Callable[[], None]:
        """What a model job calls before each batch it takes: wait while the
        cheap pool has work (messages in its work queue or in its threads'
        hands), up to ``max_wait_ms``. The pools share one interpreter, so a
        batch's Python work takes the GIL from the remembers; holding the next
        batch back until they are done keeps a remember from waiting on an
        extraction, and the bound keeps a flood of remembers from stopping
        extraction (a batch a ``max_wait_ms`` at the least). No wait without a
        cheap pool of its own, or with ``max_wait_ms`` 0."""
        cheap = [
            pool for pool in self.pools if pool.consumer_whitelist and pool.consumer_whitelist <= set(CHEAP_QUEUES)
        ]
        if not cheap or max_wait_ms <= 0:
            return lambda: None
        work = cheap[0].work_queue

        def wait() -> None:
            with work.all_tasks_done:  # (notified when its last task is done)
                work.all_tasks_done.wait_for(lambda: work.unfinished_tasks == 0, timeout=max_wait_ms / 1000)

        return wait

    def start(self) -> None:
        self.broker.emit_before("worker_boot", self)
        for pool in self.pools:
            pool.start()
        self.broker.emit_after("worker_boot", self)

    def pause(self) -> None:
        for pool in self.pools:
            pool.pause()

    def resume(self) -> None:
        for pool in self.pools:
            pool.resume()

    def stop(self, timeout: int = 600_000) -> None:
        """Each pool stops as a worker does (its threads finish what they run,
        what it prefetched goes back to Redis), all at once, within ``timeout`` ms."""
        self.broker.emit_before("worker_shutdown", self)
        stopping = [
            threading.Thread(target=pool.stop, kwargs={"timeout": timeout}, name="pool-stop") for pool in self.pools
        ]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join()
        self.broker.emit_after("worker_shutdown", self)

    def join(self) -> None:
        for pool in self.pools:
            pool.join()


def run_pools(workers: WorkerSettings, processes: int, threads: int, *, knowledge_on: bool) -> int:
    """Run the host's pools (:func:`worker_pools`) until a stop signal (passed on to each) or one's death.

    Returns the first non-zero exit code of a pool, else 0.
    """
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)  # only record: the loop below passes it on

    for sig in FORWARDED:
        signal.signal(sig, forward)
    children = [
        subprocess.Popen(pool.command, env={**os.environ, **pool.env})  # noqa: S603 - the pools' worker commands
        for pool in worker_pools(workers, processes, threads, knowledge_on=knowledge_on)
    ]
    forwarded = 0
    code = 0
    while any(child.poll() is None for child in children):
        for signum in received[forwarded:]:
            for child in children:
                if child.poll() is None:
                    child.send_signal(signum)
        forwarded = len(received)
        dead = [c for c in children if c.poll() is not None and c.returncode != 0]
        if dead and not received:
            code = code or dead[0].returncode
            received.append(signal.SIGTERM)  # one pool died: stop the others, exit non-zero
        time.sleep(0.1)
    return code or next((c.returncode for c in children if c.returncode), 0)
