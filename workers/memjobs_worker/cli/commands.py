"""The handlers behind ``memjobs`` subcommands: each takes (settings, args) and
returns an exit code."""

from __future__ import annotations

import argparse
import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

from memjobs_client.contracts import ForgetSource, owner_key
from memjobs_client.errors import InvalidPayload, PermanentError
from memjobs_client.payloads import build_payload
from memjobs_worker.cli import api_command, exits
from memjobs_worker.cli.output import emit, error, say, status_table
from memjobs_worker.endpoints import resolve_endpoints
from memjobs_worker.logs import configure_logging
from memjobs_worker.ops import status as ops
from memjobs_worker.ops.server import prepare_metrics_dir, probe_metrics_address
from memjobs_worker.pools import worker_command
from memjobs_worker.runtime import Runtime, open_door
from memjobs_worker.settings import Settings
from memjobs_worker.supervisor import Stack


@contextmanager
def runtime_for(settings: Settings) -> Iterator[Runtime]:
    """A door's runtime on the configured (or running embedded) Redis and database:
    its producer client decides forgets on the ledger, as the HTTP API's does."""
    runtime = open_door(settings, resolve_endpoints(settings))
    try:
        yield runtime
    finally:
        runtime.close()
        runtime.client.close()


def owner_arg(value: str) -> str:
    try:
        return owner_key(value)
    except ValueError:
        raise InvalidPayload("--owner must not be empty") from None


def config(settings: Settings, args: argparse.Namespace) -> int:
    emit(settings.redacted(), as_json=args.json)
    return exits.OK


def up(settings: Settings, args: argparse.Namespace) -> int:
    configure_logging(level=settings.log_level)
    stack = Stack(settings, processes=args.processes or settings.worker_processes,
                  threads=args.threads or settings.worker_threads)
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
        for notice in stack.notices:
            say(f"memjobs: {notice}", err=True)
        metrics = stack.metrics_url or "off"
        say(f"memjobs is up: redis {endpoints.redis_url}, API {api.url}, metrics {metrics}, data in "
            f"{settings.data_dir} (worker log: {settings.data_dir / 'logs' / 'worker.log'}, "
            f"state: {settings.data_dir / 'run' / 'stack.json'}); Ctrl-C stops it")
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


def worker(settings: Settings, args: argparse.Namespace) -> int:
    resolve_endpoints(settings)  # fail here, clearly, rather than in every process
    os.umask(0o077)  # mem0's history and anything else under the data directory: owner-only
    command = worker_command(args.processes or settings.worker_processes,
                             args.threads or settings.worker_threads)
    env = dict(os.environ)
    url, problem = probe_metrics_address(settings)
    if problem:
        # stderr is this host's JSON Lines log: the warning is one record of it
        configure_logging(level=settings.log_level)
        logging.getLogger("memjobs_worker.ops.server").warning(problem)
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    elif url:
        prepare_metrics_dir(settings, env)
    os.execve(command[0], command, env)
    return exits.FAILED  # pragma: no cover - execv does not return


def remember(settings: Settings, args: argparse.Namespace) -> int:
    with runtime_for(settings) as rt:
        try:
            source_id = rt.client.remember(args.owner, args.text, session_id=args.session,
                                           kind=args.kind)
        except PermanentError as exc:
            emit({"source_id": None, "status": "refused", "reason": exc.reason,
                  "error": str(exc)}, as_json=args.json)
            return exits.REFUSED
    emit({"source_id": source_id, "status": "queued"}, as_json=args.json)
    return exits.OK


def forget(settings: Settings, args: argparse.Namespace) -> int:
    """Forget a source at once and queue the purge of its memories, through the
    producer client's one forget path (the HTTP API's too): ``forgotten`` (or
    ``already_forgotten``); a source id the owner does not have is ``not_found``,
    exit 6."""
    key = owner_arg(args.owner)
    build_payload(ForgetSource, owner_key=key, source_id=args.source)  # refused before any backend
    with runtime_for(settings) as rt:
        outcome = rt.client.forget(args.owner, args.source)
    if outcome.status == "not_found":
        emit({"source_id": outcome.source_id, "status": "not_found",
              "error": "this owner has no such source"}, as_json=args.json)
        return exits.NOT_FOUND
    emit({"source_id": outcome.source_id, "status": outcome.status, "purge": outcome.purge},
         as_json=args.json)
    return exits.OK


def sources(settings: Settings, args: argparse.Namespace) -> int:
    key = owner_arg(args.owner)
    with runtime_for(settings) as rt:
        rows = rt.personal_memory.sources(key)
    listing = []
    for r in rows:
        item = {"source_id": r.source_id, "state": r.state,
                "created_at": r.created_at.isoformat(),
                "learned_at": r.learned_at.isoformat() if r.learned_at else None,
                "reason": r.reason}  # why a source is failed (None otherwise)
        if args.show_text:
            item["text"] = r.text
        listing.append(item)
    columns = (["source_id", "state", "created_at", "learned_at", "reason"]
               + (["text"] if args.show_text else []))
    emit(listing, as_json=args.json, columns=columns)
    return exits.OK


def memories(settings: Settings, args: argparse.Namespace) -> int:
    key = owner_arg(args.owner)
    with runtime_for(settings) as rt:
        hits = rt.personal_memory.memories(key)
    emit([{"memory_id": h.memory_id, "text": h.text, "source_ids": h.source_ids} for h in hits],
         as_json=args.json, columns=["memory_id", "text", "source_ids"])
    return exits.OK


def recall(settings: Settings, args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise InvalidPayload("--limit must be at least 1")
    if not args.query.strip():
        raise InvalidPayload("--query must not be empty")
    key = owner_arg(args.owner)
    with runtime_for(settings) as rt:
        hits = rt.personal_memory.recall(key, args.query, args.limit)
    emit([{"memory_id": h.memory_id, "text": h.text, "score": h.score,
           "source_ids": h.source_ids} for h in hits],
         as_json=args.json, columns=["memory_id", "score", "text", "source_ids"])
    return exits.OK


def status(settings: Settings, args: argparse.Namespace) -> int:
    with runtime_for(settings) as rt:
        document = ops.status(rt.redis, rt.store)
    if args.json:
        emit(document, as_json=True)
    else:
        print(status_table(document))
    return exits.OK


def check(settings: Settings, args: argparse.Namespace) -> int:
    with runtime_for(settings) as rt:
        problem = ops.check(rt.redis, rt.store)
    if problem is None:
        print("ok")
        return exits.OK
    error(problem)
    return exits.FAILED


def sweep(settings: Settings, args: argparse.Namespace) -> int:
    if getattr(args, "every", None):
        from memjobs_worker.sweeper import sweep_forever

        with runtime_for(settings) as rt:
            sweep_forever(rt.sweeper, settings, args.every)
        return exits.OK
    with runtime_for(settings) as rt:
        done = rt.sweeper.once()
    emit(done, as_json=args.json)
    return exits.OK


def demo(settings: Settings, args: argparse.Namespace) -> int:
    from memjobs_worker.cli.demo import run_demo

    return run_demo(settings)
