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
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from memjobs_client.contracts import CHEAP_QUEUES, MODEL_QUEUES, QUEUE_KNOWLEDGE
from memjobs_worker.settings import Settings

#: Signals a runner passes on to its pools.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def worker_command(processes: int, threads: int, queues: Sequence[str] = ()) -> list[str]:
    """The command line of memjobs' workers (Dramatiq with memjobs' logging):
    every pool of the host, or one pool on ``queues``."""
    command = [sys.executable, "-m", "memjobs_worker",
               "--processes", str(processes), "--threads", str(threads)]
    return [*command, "--queues", *queues] if queues else command


@dataclass(frozen=True)
class WorkerPool:
    """One Dramatiq process group: its command line and what its environment adds."""

    command: list[str]
    env: dict[str, str] = field(default_factory=dict)


def worker_pools(settings: Settings, processes: int, threads: int) -> list[WorkerPool]:
    """Every pool a worker host runs: ``processes`` × ``threads`` for the jobs
    that call a model (it serves the host's metrics), and the cheap jobs' own
    pool when the settings give it processes (else one pool takes everything)."""
    # Each pool's processes size their database pools by their own thread count.
    sized = {"MEMJOBS_WORKER_PROCESSES": str(processes), "MEMJOBS_WORKER_THREADS": str(threads)}
    # Knowledge is opt-in: off, no pool consumes its queue.
    model_queues = tuple(q for q in MODEL_QUEUES if settings.knowledge_enabled or q != QUEUE_KNOWLEDGE)
    if settings.fast_worker_processes == 0:
        return [WorkerPool(worker_command(processes, threads, (*model_queues, *CHEAP_QUEUES)), sized)]
    return [WorkerPool(worker_command(processes, threads, model_queues), sized),
            WorkerPool(worker_command(settings.fast_worker_processes, settings.fast_worker_threads,
                                      CHEAP_QUEUES), {"MEMJOBS_METRICS_ENDPOINT": "false"})]


def run_pools(settings: Settings, processes: int, threads: int) -> int:
    """Run the host's pools until a stop signal (passed on to each) or one's death.

    Returns the first non-zero exit code of a pool, else 0.
    """
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)  # only record: the loop below passes it on

    for sig in FORWARDED:
        signal.signal(sig, forward)
    children = [subprocess.Popen(pool.command, env={**os.environ, **pool.env})
                for pool in worker_pools(settings, processes, threads)]
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
