"""``memjobs`` subcommands of session end: memory, sessions (end-session and
task are producer commands: :mod:`memjobs_worker.cli.producer_commands`)."""

from __future__ import annotations

import argparse

from memjobs_client.errors import InvalidPayload
from memjobs_worker.cli import exits
from memjobs_worker.cli.door import owner_arg, runtime_for
from memjobs_worker.cli.options import limit_option, limited
from memjobs_worker.cli.output import emit, error, say
from memjobs_worker.cli.producer_commands import switched_off
from memjobs_worker.settings import Settings


def memory(settings: Settings, args: argparse.Namespace) -> int:
    owner_arg(args.owner)  # refuses an empty owner
    # The memory service takes the owner id (a host's provider maps tenants by it).
    from memjobs_worker.sessions.memory_docs import ChangeContext

    owner, context = args.owner, ChangeContext("cli")
    with runtime_for(settings) as rt:
        service = rt.memory_docs
        if args.op == "read":
            docs = [service.read(owner, args.doc)] if args.doc else service.snapshot(owner)
            if args.json:
                emit(
                    [{"doc": d.doc, "scope": d.scope, "version": d.version, "content": d.content} for d in docs],
                    as_json=True,
                )
                return exits.OK
            for n, d in enumerate(docs):
                say(
                    ("\n" if n else "")
                    + f"{d.doc} (version {d.version}"
                    + (")" if d.content.strip() else ", empty: nothing is written in it yet)")
                )
                if d.content.strip():
                    say(d.content.rstrip("\n"))
            if not docs:
                say("no memory documents")
            return exits.OK
        if not args.doc or (args.op == "append" and not args.text) or (args.op == "replace" and not args.old):
            raise InvalidPayload("memory append needs --doc and --text; memory replace needs --doc and --old")
        if args.op == "append":
            result = service.append(owner, args.doc, args.text, context=context)
        elif args.old not in service.read(owner, args.doc).content:
            # The service says "duplicate" when the new text is already there (a
            # consolidation patch applied twice); asked by a person, the old text is missing.
            if args.json:
                emit(
                    {
                        "applied": False,
                        "doc": args.doc,
                        "version": service.read(owner, args.doc).version,
                        "reason": "not_found",
                        "error": f"--old does not occur in {args.doc}",
                    },
                    as_json=True,
                )
            else:
                error(f"not applied: --old does not occur in {args.doc}")
            return exits.NOT_FOUND
        else:
            result = service.replace(owner, args.doc, args.old, args.new, context=context, strict=True)
    if args.json:
        emit(
            {"applied": result.applied, "doc": result.doc, "version": result.version, "reason": result.reason},
            as_json=True,
        )
    elif result.applied:
        say(f"{result.doc}: {args.op} applied (version {result.version})")
    else:
        say(f"{result.doc}: {args.op} not applied ({result.reason}; version {result.version})")
    return exits.OK if result.applied else exits.REFUSED


def sessions(settings: Settings, args: argparse.Namespace) -> int:
    with runtime_for(settings) as rt:
        if args.runs:  # the session-end runs: done, skipped or failed (with the reason), or running
            runs = rt.sessions.run_records(owner_arg(args.owner), args.days)
            emit(
                [r.as_dict() for r in limited(runs, args, "session-end runs")],
                as_json=args.json,
                columns=["session_id", "kind", "state", "attempts", "reason", "updated_at"],
            )
            return exits.OK
        recalled = rt.sessions.recall_sessions(owner_arg(args.owner), args.days)
    for item in switched_off(settings.sessions, settings.model_configured):
        if item["job"] == "digest_session":
            # stderr: stdout stays one JSON document with --json
            say(
                f"memjobs: session digests are switched off: {item['why']}; only digests kept from before are listed",
                err=True,
            )
    emit(
        [r.as_dict() for r in limited(recalled, args, "sessions")],
        as_json=args.json,
        columns=["session_id", "created_at", "topic", "gist", "tasks"],
    )
    return exits.OK


# --- options ----------------------------------------------------------------------


def memory_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "op",
        choices=["read", "append", "replace"],
        help="read a document (or both), append Markdown to one, or replace a unique text in one",
    )
    p.add_argument("--owner", required=True, help="the owner (user) id")
    p.add_argument(
        "--doc",
        choices=["USER.md", "MEMORY.md"],
        help="USER.md (how to talk to the user) or MEMORY.md (facts and decisions)",
    )
    p.add_argument("--text", help="Markdown to append")
    p.add_argument("--old", help="replace: the document's unique text to replace")
    p.add_argument("--new", default="", help="replace: the replacement (empty deletes)")


def sessions_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--owner", required=True, help="the owner (user) id")
    p.add_argument("--days", type=int, default=7, help="sessions of the last DAYS days (default 7)")
    limit_option(p)
    p.add_argument(
        "--runs",
        action="store_true",
        help="list the session-end runs (state, attempts, reason: why skipped or failed) instead",
    )
