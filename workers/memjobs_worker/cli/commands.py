"""The readers' and operators' commands: config, sources, memories, recall,
status, check, sweep, demo. Each handler takes (settings, args) and returns an
exit code; ``*_options`` add a command's options to its parser.

Light to import: what a command needs beyond the settings (the door's runtime,
the status views, the leftovers' finder) is imported inside it, so ``config``
and a listing read through the running stack's API start in a blink.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from memjobs_client.errors import ConfigurationError, InvalidPayload
from memjobs_worker.cli import exits
from memjobs_worker.cli.api_reads import api_get
from memjobs_worker.cli.door import owner_arg, runtime_for
from memjobs_worker.cli.options import limit_option, limited, owner_option
from memjobs_worker.cli.output import emit, error, status_table, table
from memjobs_worker.cli.stack_view import StackView, follow_stack
from memjobs_worker.embedded.stack import read_stack
from memjobs_worker.settings import Settings, env_name


def config(settings: Settings, args: argparse.Namespace) -> int:
    """The effective settings (the running stack's switches where one runs here),
    secrets redacted, and where each value came from."""
    view: StackView = getattr(args, "stack_view", None) or follow_stack(settings)
    document = settings.redacted()
    for name, is_set in view.secrets_set.items():
        document[name] = "[REDACTED]" if is_set else None  # the stack's: whether set, never the value
    document["from"] = {name: view.origins.get(name, "derived") for name in document}
    if view.stack is not None:
        document["stack"] = {
            "pid": view.stack.pid,
            "api_url": view.stack.api_url,
            "metrics_url": view.stack.metrics_url,
        }
    if args.json:
        emit(document, as_json=True)
        return exits.OK
    origins = document.pop("from")
    document.pop("stack", None)
    rows = [
        {
            "setting": name,
            "variable": env_name(name) if origins[name] != "derived" else "-",
            "value": value,
            "from": origins[name],
        }
        for name, value in document.items()
    ]
    print(table(rows, ["setting", "value", "from", "variable"]))
    if view.stack is not None:
        print(f"\nstack running in {settings.data_dir} (pid {view.stack.pid}): its switches are the ones marked stack")
    return exits.OK


SOURCE_COLUMNS = ["source_id", "state", "created_at", "learned_at", "reason"]
#: The most an API listing returns by default (MEMJOBS_API_MAX_LISTING): a longer
#: --limit reads directly, so that it is honoured whatever the stack's cap.
API_PAGE = 200


def _paged(args: argparse.Namespace) -> StackView | None:
    """The running stack to ask, when its API's page holds what ``--limit`` asks for."""
    return getattr(args, "stack_view", None) if args.limit < API_PAGE else None


def sources(settings: Settings, args: argparse.Namespace) -> int:
    key = owner_arg(args.owner)
    listing: list[dict[str, Any]]
    via_api = api_get(
        _paged(args),
        settings.api,
        "/v1/sources",
        args.owner,
        {"limit": args.limit + 1, "include_text": str(args.show_text).lower()},
    )
    if via_api is not None:
        listing = [{name: row.get(name) for name in (*SOURCE_COLUMNS, "text")} for row in via_api["sources"]]
        more = bool(via_api.get("truncated")) or len(listing) > args.limit
    else:
        with runtime_for(settings) as rt:
            rows = rt.personal_memory.sources(key)
        listing = [
            {
                "source_id": r.source_id,
                "state": r.state,
                "created_at": r.created_at.isoformat(),
                "learned_at": r.learned_at.isoformat() if r.learned_at else None,
                "reason": r.reason,  # why a source is failed (None otherwise)
                "text": r.text,
            }
            for r in rows
        ]
        more = False
    shown = limited(listing, args, "sources", more=more)
    if not args.show_text:
        for item in shown:
            item.pop("text", None)
    columns = SOURCE_COLUMNS + (["text"] if args.show_text else [])
    emit(shown, as_json=args.json, columns=columns, empty="no sources")
    return exits.OK


def memories(settings: Settings, args: argparse.Namespace) -> int:
    key = owner_arg(args.owner)
    via_api = api_get(_paged(args), settings.api, "/v1/memories", args.owner, {"limit": args.limit + 1})
    if via_api is not None:
        found = [
            {"memory_id": m["memory_id"], "text": m["text"], "source_ids": m["source_ids"]} for m in via_api["memories"]
        ]
        more = bool(via_api.get("truncated")) or len(found) > args.limit
    else:
        with runtime_for(settings) as rt:
            hits = rt.personal_memory.memories(key)
        found = [{"memory_id": h.memory_id, "text": h.text, "source_ids": h.source_ids} for h in hits]
        more = False
    emit(
        limited(found, args, "memories", more=more),
        as_json=args.json,
        columns=["memory_id", "text", "source_ids"],
        empty="no memories",
    )
    return exits.OK


def recall(settings: Settings, args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise InvalidPayload("--limit must be at least 1")
    if not args.query.strip():
        raise InvalidPayload("--query must not be empty")
    key = owner_arg(args.owner)
    via_api = api_get(
        getattr(args, "stack_view", None),
        settings.api,
        "/v1/recall",
        args.owner,
        {},
        body={"owner_id": args.owner, "query": args.query, "limit": args.limit},
    )
    if via_api is not None:  # the stack's own embedder, already loaded: no model to load here
        found = [
            {"memory_id": m["memory_id"], "text": m["text"], "score": m["score"], "source_ids": m["source_ids"]}
            for m in via_api["memories"]
        ]
    else:
        with runtime_for(settings) as rt:
            hits = rt.personal_memory.recall(key, args.query, args.limit)
        found = [{"memory_id": h.memory_id, "text": h.text, "score": h.score, "source_ids": h.source_ids} for h in hits]
    emit(found, as_json=args.json, columns=["memory_id", "score", "text", "source_ids"], empty="no memory matches")
    return exits.OK


def refuse_leftovers(data_dir: Path) -> None:
    """Refuse to look at the stack when none runs in ``data_dir`` but a dead ``memjobs up`` left
    processes running.

    Raises:
        ConfigurationError: what was left running, in one line.
    """
    if read_stack(data_dir) is not None:
        return
    from memjobs_worker.embedded.leftovers import find_leftovers

    left = find_leftovers(data_dir)
    if left:
        raise ConfigurationError(
            f"no memjobs stack is running in {data_dir}, but a memjobs up that died left "
            f"{', '.join(str(x) for x in left)} running: `memjobs down` stops them"
        )


def status(settings: Settings, args: argparse.Namespace) -> int:
    refuse_leftovers(settings.data_dir)
    from memjobs_worker.ops import status as ops

    with runtime_for(settings) as rt:
        document = ops.status(rt.redis, rt.store)
    stack = read_stack(settings.data_dir)
    if stack is not None and stack.postgres_restarts:
        document["embedded_postgres"] = {
            "restarts": stack.postgres_restarts,
            "last_restarted_at": stack.postgres_restarted_at,
        }
    if args.json:
        emit(document, as_json=True)
    else:
        print(status_table(document))
    return exits.OK


def check(settings: Settings, args: argparse.Namespace) -> int:
    refuse_leftovers(settings.data_dir)
    from memjobs_worker.ops import status as ops

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
            sweep_forever(rt.sweeper, settings.data_dir, args.every)
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
    owner_option(p)


def listing_options(p: argparse.ArgumentParser) -> None:
    owner_option(p)
    limit_option(p)


def sources_options(p: argparse.ArgumentParser) -> None:
    listing_options(p)
    p.add_argument("--show-text", action="store_true", help="print each source's text too (it is the user's own words)")


def recall_options(p: argparse.ArgumentParser) -> None:
    owner_options(p)
    p.add_argument("--query", required=True, help="what to look for, in any language")
    p.add_argument("--limit", type=int, default=5, help="at most this many memories (default 5)")


def sweep_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="sweep again every SECONDS until SIGTERM/SIGINT (a sweeper service)",
    )
