"""The readers' and operators' commands: config, sources, memories, recall,
status, check, sweep, demo. Each handler takes (settings, args) and returns an
exit code; ``*_options`` add a command's options to its parser."""

from __future__ import annotations

import argparse

from memjobs_client.errors import InvalidPayload
from memjobs_worker.cli import exits
from memjobs_worker.cli.door import owner_arg, runtime_for
from memjobs_worker.cli.output import emit, error, status_table
from memjobs_worker.embedded.leftovers import find_leftovers
from memjobs_worker.embedded.stack import read_stack
from memjobs_worker.ops import status as ops
from memjobs_worker.settings import Settings


def config(settings: Settings, args: argparse.Namespace) -> int:
    emit(settings.redacted(), as_json=args.json)
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
    emit(listing, as_json=args.json, columns=columns, empty="no sources")
    return exits.OK


def memories(settings: Settings, args: argparse.Namespace) -> int:
    key = owner_arg(args.owner)
    with runtime_for(settings) as rt:
        hits = rt.personal_memory.memories(key)
    emit([{"memory_id": h.memory_id, "text": h.text, "source_ids": h.source_ids} for h in hits],
         as_json=args.json, columns=["memory_id", "text", "source_ids"], empty="no memories")
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
         as_json=args.json, columns=["memory_id", "score", "text", "source_ids"],
         empty="no memory matches")
    return exits.OK


def leftovers_problem(settings: Settings) -> str | None:
    """With no stack running here, what a dead ``memjobs up`` left running, said
    in one line (None: nothing, or a stack runs)."""
    if read_stack(settings.data_dir) is not None:
        return None
    left = find_leftovers(settings.data_dir)
    if not left:
        return None
    return (f"no memjobs stack is running in {settings.data_dir}, but a memjobs up that died left "
            f"{', '.join(str(x) for x in left)} running: `memjobs down` stops them")


def status(settings: Settings, args: argparse.Namespace) -> int:
    problem = leftovers_problem(settings)
    if problem is not None:
        error(problem)
        return exits.CONFIG
    with runtime_for(settings) as rt:
        document = ops.status(rt.redis, rt.store)
    stack = read_stack(settings.data_dir)
    if stack is not None and stack.postgres_restarts:
        document["embedded_postgres"] = {"restarts": stack.postgres_restarts,
                                         "last_restarted_at": stack.postgres_restarted_at}
    if args.json:
        emit(document, as_json=True)
    else:
        print(status_table(document))
    return exits.OK


def check(settings: Settings, args: argparse.Namespace) -> int:
    problem = leftovers_problem(settings)
    if problem is not None:
        error(problem)
        return exits.CONFIG
    with runtime_for(settings) as rt:
        problem = ops.check(rt.redis, lambda: rt.store)
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


# --- options ----------------------------------------------------------------------


def owner_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--owner", required=True)


def sources_options(p: argparse.ArgumentParser) -> None:
    owner_options(p)
    p.add_argument("--show-text", action="store_true")


def recall_options(p: argparse.ArgumentParser) -> None:
    owner_options(p)
    p.add_argument("--query", required=True)
    p.add_argument("--limit", type=int, default=5)


def sweep_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--every", type=float, default=None, metavar="SECONDS",
                   help="sweep again every SECONDS until SIGTERM/SIGINT (a sweeper service)")
