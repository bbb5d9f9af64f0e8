"""The handlers behind ``memjobs`` subcommands: each takes (settings, args) and
returns an exit code."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager

from memjobs_client.contracts import owner_key
from memjobs_client.errors import InvalidPayload, PermanentError
from memjobs_worker.cli import api_command, exits
from memjobs_worker.cli.output import emit, error
from memjobs_worker.embedded.supervisor import Stack, sweep_once, worker_command
from memjobs_worker.endpoints import resolve_endpoints
from memjobs_worker.logs import configure_logging
from memjobs_worker.observability import status as ops
from memjobs_worker.observability.server import prepare_metrics_dir
from memjobs_worker.runtime import Runtime, producer_client
from memjobs_worker.settings import Settings


@contextmanager
def runtime_for(settings: Settings) -> Iterator[Runtime]:
    """A runtime on the configured (or running embedded) Redis and database."""
    endpoints = resolve_endpoints(settings)
    client = producer_client(settings, redis_url=endpoints.redis_url)
    runtime = Runtime(settings, endpoints, client)
    try:
        yield runtime
    finally:
        runtime.close()
        client.close()


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
    api = None
    try:
        endpoints = stack.start()
        stack.start_sweeper()
        api = api_command.start_beside_stack(settings, endpoints)
        print(f"memjobs is up: redis {endpoints.redis_url}, API {api.url}, data in {settings.data_dir} "
              f"(worker log: {settings.data_dir / 'logs' / 'worker.log'}); Ctrl-C stops it",
              flush=True)
        stack.supervise()
    finally:
        if api is not None and not api.stop():
            error("the HTTP API did not stop within 15 s")
        problems = stack.stop()
    if problems:
        for problem in problems:
            error(problem)
        return exits.FAILED
    print("memjobs stopped", flush=True)
    return exits.OK


def worker(settings: Settings, args: argparse.Namespace) -> int:
    resolve_endpoints(settings)  # fail here, clearly, rather than in every process
    command = worker_command(args.processes or settings.worker_processes,
                             args.threads or settings.worker_threads)
    env = dict(os.environ)
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
    with runtime_for(settings) as rt:
        rt.client.forget(args.owner, args.source)
    emit({"source_id": args.source, "status": "queued"}, as_json=args.json)
    return exits.OK


def sources(settings: Settings, args: argparse.Namespace) -> int:
    with runtime_for(settings) as rt:
        rows = rt.store.list_sources(owner_arg(args.owner))
    listing = []
    for r in rows:
        item = {"source_id": r.source_id, "state": r.state,
                "created_at": r.created_at.isoformat(),
                "learned_at": r.learned_at.isoformat() if r.learned_at else None}
        if args.show_text:
            item["text"] = r.text
        listing.append(item)
    columns = ["source_id", "state", "created_at", "learned_at"] + (["text"] if args.show_text else [])
    emit(listing, as_json=args.json, columns=columns)
    return exits.OK


def memories(settings: Settings, args: argparse.Namespace) -> int:
    with runtime_for(settings) as rt:
        hits = rt.pipeline.memories(owner_arg(args.owner))
    emit([{"memory_id": h.memory_id, "text": h.text, "source_ids": h.source_ids} for h in hits],
         as_json=args.json, columns=["memory_id", "text", "source_ids"])
    return exits.OK


def recall(settings: Settings, args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise InvalidPayload("--limit must be at least 1")
    if not args.query.strip():
        raise InvalidPayload("--query must not be empty")
    with runtime_for(settings) as rt:
        hits = rt.pipeline.recall(owner_arg(args.owner), args.query, args.limit)
    emit([{"memory_id": h.memory_id, "text": h.text, "score": h.score,
           "source_ids": h.source_ids} for h in hits],
         as_json=args.json, columns=["memory_id", "score", "text", "source_ids"])
    return exits.OK


def status(settings: Settings, args: argparse.Namespace) -> int:
    with runtime_for(settings) as rt:
        document = ops.status(rt.redis, rt.store)
    emit(document, as_json=args.json)
    return exits.OK


def check(settings: Settings, args: argparse.Namespace) -> int:
    with runtime_for(settings) as rt:
        problem = ops.check(rt.redis, rt.store)
    if problem is None:
        print("ok")
        return exits.OK
    error(problem)
    return exits.FAILED


def drain(settings: Settings, args: argparse.Namespace) -> int:
    with runtime_for(settings) as rt:
        if ops.drain(rt.redis, rt.store, args.timeout):
            return exits.OK
    error(f"not drained after {args.timeout:g} s")
    return exits.FAILED


def sweep(settings: Settings, args: argparse.Namespace) -> int:
    with runtime_for(settings) as rt:
        done = sweep_once(rt, settings)
    emit(done, as_json=args.json)
    return exits.OK


def demo(settings: Settings, args: argparse.Namespace) -> int:
    from memjobs_worker.cli.demo import run_demo

    return run_demo(settings)
