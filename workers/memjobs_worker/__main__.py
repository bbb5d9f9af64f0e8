"""``python -m memjobs_worker``: the worker processes of one host.

Dramatiq's command line with memjobs' logging: every record — Dramatiq's main
process, its worker and fork processes, every library — goes through the JSON
Lines formatter (``--skip-logging`` keeps Dramatiq from installing its
plain-text handlers), and uncaught exceptions are logged with the traceback as
a field. Arguments after the module are Dramatiq's (``--processes``,
``--threads``, ``--queues`` …); the broker module is always
``memjobs_worker.app``. Without ``--queues`` it runs the host's pools
(:mod:`memjobs_worker.pools`), each on its own queues: in processes of their
own, or, on a small host, all in this one (:func:`run_shared`).

A pool in processes of its own that takes only jobs that call a model runs at
a lower CPU priority (:data:`MODEL_POOL_NICENESS`): on a host whose cores are
busy, a remember (the cheap pool, a producer waiting on it) goes first and
extraction, which waits on the model most of its time anyway, takes what is
left. (Pools sharing one process share its priority.)
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence

from dramatiq import cli

from memjobs_client.contracts import CHEAP_QUEUES
from memjobs_client.errors import ConfigurationError
from memjobs_worker.logs import configure_logging
from memjobs_worker.pools import FORWARDED, SharedWorker, pool_queues, run_pools, shares_process
from memjobs_worker.settings import load_settings

log = logging.getLogger("memjobs_worker.pools")

#: The workers' entry module: Dramatiq's broker module, imported by each worker process.
BROKER_MODULE = "memjobs_worker.app"
#: What Dramatiq gives its workers to finish their jobs once asked to stop.
SHUTDOWN_TIMEOUT_MS = 600_000

#: Added to the niceness of a process that takes no cheap job (see the module).
MODEL_POOL_NICENESS = 10


def niceness_for(queues: Sequence[str] | None) -> int:
    """How much lower a worker process on ``queues`` runs (None: every queue)."""
    return MODEL_POOL_NICENESS if queues and not set(queues) & set(CHEAP_QUEUES) else 0


def main(argv: list[str]) -> int:
    try:
        settings = load_settings()
    except ConfigurationError as exc:
        print(f"memjobs: {exc}", file=sys.stderr)
        return 3
    configure_logging(level=settings.logs.level)
    if "--queues" not in argv and "-Q" not in argv:
        # The host's pools (model jobs, cheap jobs), each this command on its queues.
        sizes = argparse.ArgumentParser(add_help=False)
        sizes.add_argument("--processes", "-p", type=int, default=settings.workers.worker_processes)
        sizes.add_argument("--threads", "-t", type=int, default=settings.workers.worker_threads)
        given, _rest = sizes.parse_known_args(argv)
        knowledge_on = settings.knowledge.enabled
        if shares_process(settings.workers, given.processes):
            pools = pool_queues(settings.workers, given.threads, knowledge_on=knowledge_on)
            return run_shared(pools, argv, serve_metrics=settings.metrics.endpoint)
        return run_pools(settings.workers, given.processes, given.threads, knowledge_on=knowledge_on)
    parser = cli.make_argument_parser()  # type: ignore[no-untyped-call]
    args = parser.parse_args([BROKER_MODULE, "--skip-logging", *argv])
    if lower := niceness_for(args.queues):
        os.nice(lower)  # before Dramatiq forks: its processes inherit it
    code: int = cli.main(args)  # type: ignore[no-untyped-call]
    return code


def run_shared(pools: list[tuple[tuple[str, ...], int]], argv: list[str], *, serve_metrics: bool) -> int:
    """Every pool of the host (``pools``: :func:`~memjobs_worker.pools.pool_queues`) in this
    process (:class:`~memjobs_worker.pools.SharedWorker`) and, with ``serve_metrics``, its
    metrics endpoint on a thread, as Dramatiq runs a worker process:
    SIGTERM or SIGINT stops it (the jobs in hand finish, what was prefetched
    goes back to Redis; a second signal exits at once), SIGHUP stops it and
    starts it again (Dramatiq's reload)."""
    received: list[int] = []

    def record(signum: int, _frame: object) -> None:
        if received and signum != signal.SIGHUP:
            os._exit(1)  # asked twice: Dramatiq's "killing worker process"
        received.append(signum)

    for sig in FORWARDED:
        signal.signal(sig, record)
    # The process's wiring (broker, runtime, actors), imported by name as Dramatiq imports it.
    app = importlib.import_module(BROKER_MODULE)

    app.broker.emit_after("process_boot")
    if serve_metrics and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from memjobs_worker.ops.server import serve_on_thread

        serve_on_thread(app.settings.metrics, app.endpoints, idle_close_s=app.settings.database.idle_close_s)
    worker = SharedWorker(app.broker, pools)
    app.runtime.before_batch = worker.cheap_first(app.settings.workers.cheap_first_ms)
    worker.start()
    log.info("Worker process is ready for action.")  # Dramatiq's words, as its processes say them
    while not received:
        time.sleep(0.2)
    worker.stop(timeout=SHUTDOWN_TIMEOUT_MS)
    app.broker.close()
    if received[0] == signal.SIGHUP:
        os.execv(sys.executable, [sys.executable, "-m", "memjobs_worker", *argv])  # noqa: S606 - this worker again, same argv
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
