"""The stack's commands: ``up`` (the embedded stack in the foreground),
``down`` (stop it, or what a dead ``up`` left), ``worker`` (worker processes
against a configured Redis) and ``url`` (where the running stack serves).

``url`` reads the state file alone (scripts call it: ``API=$(memjobs url)``),
so what the others start — the supervisor, the metrics server, the worker
pools — is imported inside them."""

from __future__ import annotations

import argparse
import logging
import os
import signal

from memjobs_client.errors import ConfigurationError
from memjobs_worker.cli import exits
from memjobs_worker.cli.output import error, say
from memjobs_worker.cli.progress import Progress
from memjobs_worker.embedded.stack import read_stack
from memjobs_worker.settings import EmbeddingSettings, KnowledgeSettings, MemorySettings, Settings

DOWN_TIMEOUT_S = 180.0  # up's own stop: sweeper 30 s, workers 60 s, PostgreSQL 60 s, Redis 20 s


def up(settings: Settings, args: argparse.Namespace) -> int:
    from memjobs_worker.cli import api_command
    from memjobs_worker.logs import configure_logging
    from memjobs_worker.supervisor import Stack

    configure_logging(level=settings.logs.level)
    stack = Stack(
        settings,
        processes=args.processes or settings.workers.worker_processes,
        threads=args.threads or settings.workers.worker_threads,
    )
    received = None
    api = None
    # Until supervise() takes over: any stop signal interrupts the start, and
    # stop() below undoes what was started.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.default_int_handler)
    try:
        endpoints = stack.start()
        stack.start_sweeper()
        api = api_command.start_beside_stack(settings, endpoints)
        stack.api_url = api.url
        stack.notify = lambda text: say(f"memjobs: {text}", err=True)
        for notice in stack.notices:
            say(f"memjobs: {notice}", err=True)
        metrics = stack.metrics_url or "off"
        say(
            f"memjobs is up: redis {endpoints.redis_url}, API {api.url}, console {api.url}/console, "
            f"metrics {metrics}, data in "
            f"{settings.data_dir} (worker log: {settings.data_dir / 'logs' / 'worker.log'}, "
            f"state: {settings.data_dir / 'run' / 'stack.json'}); Ctrl-C or `memjobs down` stops it"
        )
        received = stack.supervise()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # the stop is bounded: let it finish in order
        if api is not None and not api.stop():
            error("the HTTP API did not stop within 15 s")
        problems = stack.stop()
    if problems:
        for problem in problems:
            error(problem)
        return exits.FAILED
    why = f" ({signal.Signals(received).name})" if received else ""
    say(f"memjobs stopped{why}")
    return exits.OK


def down(settings: Settings, args: argparse.Namespace) -> int:
    """Stop the data directory's stack and wait until every process is gone:
    exit 0; nothing running, exit 6 (not found); still running at the deadline,
    or stopped by force (workers killed mid-job), exit 1. While it waits, what
    still runs is said on stderr (:mod:`memjobs_worker.cli.progress`)."""
    from memjobs_worker.supervisor import stop_stack

    where = settings.data_dir
    progress = Progress("processes", doing="stopping", every_s=5.0)
    result = stop_stack(
        where,
        timeout_s=args.timeout,
        waiting=lambda alive: progress.update(len(alive), detail="waiting for " + ", ".join(alive)),
    )
    progress.clear()
    if result.found == "nothing":
        error(f"no memjobs stack is running in {where}: nothing to stop")
        return exits.NOT_FOUND
    if result.remaining:
        error(
            f"still running after {args.timeout:g} s: {', '.join(result.remaining)}; see "
            f"{where / 'logs' / 'worker.log'}, then run `memjobs down` again"
        )
        return exits.FAILED
    if result.problems:
        error(f"memjobs stack in {where} stopped, but not cleanly: " + "; ".join(result.problems))
        return exits.FAILED
    if result.found == "leftovers":
        for line in result.stopped:
            say(line)
        say(f"nothing of the dead memjobs up in {where} is left running")
        return exits.OK
    say(f"memjobs stack in {where} stopped: {', '.join(result.stopped)}")
    return exits.OK


def url(settings: Settings, args: argparse.Namespace) -> int:
    """The running stack's API URL (or its metrics URL), alone on one line."""
    stack = read_stack(settings.data_dir)
    if stack is None:
        raise ConfigurationError(f"no memjobs stack is running in {settings.data_dir}: start it with `memjobs up`")
    if args.metrics:
        if stack.metrics_url is None:
            error("the running stack serves no metrics (MEMJOBS_METRICS=off, or its port was taken)")
            return exits.FAILED
        print(stack.metrics_url)
        return exits.OK
    if stack.api_url is None:
        error("the stack is still starting: its HTTP API does not listen yet")
        return exits.FAILED
    print(stack.api_url)
    return exits.OK


def worker(settings: Settings, args: argparse.Namespace) -> int:
    from memjobs_worker.endpoints import resolve_endpoints
    from memjobs_worker.logs import configure_logging
    from memjobs_worker.ops.server import prepare_metrics_dir, probe_metrics_address
    from memjobs_worker.pools import worker_command

    endpoints = resolve_endpoints(
        settings.data_dir, settings.redis, settings.database
    )  # fail here, clearly, rather than in every process
    refuse_other_embedders(settings.embedding, settings.memory, settings.knowledge, endpoints.database_url)
    os.umask(0o077)  # mem0's history and anything else under the data directory: owner-only
    command = worker_command(
        args.processes or settings.workers.worker_processes, args.threads or settings.workers.worker_threads
    )
    env = dict(os.environ)
    metrics, problem = probe_metrics_address(settings.metrics)
    if problem:
        # stderr is this host's JSON Lines log: the warning is one record of it
        configure_logging(level=settings.logs.level)
        logging.getLogger("memjobs_worker.ops.server").warning(problem)
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    elif metrics:
        prepare_metrics_dir(settings.metrics_dir, env)
    os.execve(command[0], command, env)  # noqa: S606 - the stack's own command, built above
    return exits.FAILED  # pragma: no cover - execv does not return


def refuse_other_embedders(
    embedding: EmbeddingSettings, memory: MemorySettings, knowledge: KnowledgeSettings, database_url: str
) -> None:
    """Refuse to start workers over vectors another embedder made (an upgrade
    changed the default, or a setting changed): their jobs would fail one by
    one. ``memjobs up`` re-embeds by itself; hosts of their own run
    ``memjobs reembed`` once. A database that does not answer is left to the
    workers, which wait for it.

    Raises:
        ConfigurationError: stored vectors of another embedder remain.
    """
    import psycopg

    from memjobs_client.errors import BackendUnavailable
    from memjobs_worker.ops.reembed import pending

    try:
        left = pending(embedding, memory, knowledge, database_url)
    except (psycopg.OperationalError, BackendUnavailable):
        return
    if left.required:
        chunks = left.foreign_chunks + left.bare_chunks
        raise ConfigurationError(
            f"{left.memories} stored memories and {chunks} knowledge chunks were not embedded by this "
            f"host's embedder ({left.model}): run `memjobs reembed` once (resumable), then start the "
            "workers; or set the embedder back (MEMJOBS_EMBEDDING_BASE_URL, MEMJOBS_EMBEDDING_MODEL, "
            "MEMJOBS_LOCAL_EMBEDDER)"
        )


# --- options ----------------------------------------------------------------------


def pool_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--processes",
        type=int,
        default=None,
        help="worker processes of the model jobs' pool (default MEMJOBS_WORKER_PROCESSES)",
    )
    p.add_argument(
        "--threads", type=int, default=None, help="threads per worker process (default MEMJOBS_WORKER_THREADS)"
    )


def down_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timeout",
        type=float,
        default=DOWN_TIMEOUT_S,
        help=f"seconds to wait for every process to stop (default {DOWN_TIMEOUT_S:g})",
    )


def url_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics", action="store_true", help="the metrics URL instead of the API's")
