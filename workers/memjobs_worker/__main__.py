"""``python -m memjobs_worker``: the worker processes of one host.

Dramatiq's command line with memjobs' logging: every record — Dramatiq's main
process, its worker and fork processes, every library — goes through the JSON
Lines formatter (``--skip-logging`` keeps Dramatiq from installing its
plain-text handlers), and uncaught exceptions are logged with the traceback as
a field. Arguments after the module are Dramatiq's (``--processes``,
``--threads``, ``--queues`` …); the broker module is always
``memjobs_worker.app``. Without ``--queues`` it runs the host's pools
(:mod:`memjobs_worker.pools`), each on its own queues.

A pool that takes only jobs that call a model runs at a lower CPU priority
(:data:`MODEL_POOL_NICENESS`): on a host whose cores are busy, a remember (the
cheap pool, a producer waiting on it) goes first and extraction, which waits on
the model most of its time anyway, takes what is left.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from dramatiq import cli

from memjobs_client.contracts import CHEAP_QUEUES
from memjobs_client.errors import ConfigurationError
from memjobs_worker.logs import configure_logging
from memjobs_worker.pools import run_pools
from memjobs_worker.settings import load_settings

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
    configure_logging(level=settings.log_level)
    if "--queues" not in argv and "-Q" not in argv:
        # The host's pools (model jobs, cheap jobs), each this command on its queues.
        sizes = argparse.ArgumentParser(add_help=False)
        sizes.add_argument("--processes", "-p", type=int, default=settings.worker_processes)
        sizes.add_argument("--threads", "-t", type=int, default=settings.worker_threads)
        given, _rest = sizes.parse_known_args(argv)
        return run_pools(settings, given.processes, given.threads)
    parser = cli.make_argument_parser()  # type: ignore[no-untyped-call]
    args = parser.parse_args(["memjobs_worker.app", "--skip-logging", *argv])
    if lower := niceness_for(args.queues):
        os.nice(lower)  # before Dramatiq forks: its processes inherit it
    code: int = cli.main(args)  # type: ignore[no-untyped-call]
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
