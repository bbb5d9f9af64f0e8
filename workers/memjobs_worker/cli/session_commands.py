"""``memjobs`` subcommands of session end: end-session, memory, sessions, task."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from memjobs_client.errors import InvalidPayload
from memjobs_worker.cli import exits
from memjobs_worker.cli.commands import owner_arg, runtime_for
from memjobs_worker.cli.output import emit, say
from memjobs_worker.settings import Settings

_NO_MODEL = ("no model endpoint is configured (set DASHSCOPE_API_KEY, or QWEN_AUDIO_MEMORY_BASE_URL "
             "for any OpenAI-compatible server)")


def switched_off(settings: Settings) -> list[dict[str, str]]:
    """The session-end jobs these settings switch off, each with why."""
    off = []
    if not settings.consolidation_enabled:
        why = "QWEN_AUDIO_MEMORY_AUTO=off" if settings.memory_auto == "off" else _NO_MODEL
        off.append({"job": "consolidate_session", "why": why})
    if not settings.digest_enabled:
        why = ("QWEN_AUDIO_SESSION_DIGEST is off (set it to on)" if settings.session_digest == "off"
               else _NO_MODEL)
        off.append({"job": "digest_session", "why": why})
    return off


def _load_json(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidPayload(f"cannot read the {what} file {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise InvalidPayload(f"the {what} file {path} is not JSON: {exc.msg} at line {exc.lineno}") from None


def end_session(settings: Settings, args: argparse.Namespace) -> int:
    transcript = _load_json(args.transcript, "transcript")
    tasks = _load_json(args.tasks, "tasks") if args.tasks else []
    if not isinstance(transcript, list) or not isinstance(tasks, list):
        raise InvalidPayload("the transcript and the tasks must be JSON lists")
    with runtime_for(settings) as rt:
        sent = rt.client.end_session(args.owner, args.session, transcript, tasks)
    document: dict[str, Any] = {"session_id": args.session, "enqueued": sent,
                                "status": "queued" if sent else "already_ended"}
    off = switched_off(settings)
    if off:
        document["switched_off"] = off
    if args.json:
        emit(document, as_json=True)
        return exits.OK
    say(f"session {args.session}: {document['status']}"
        + (f" ({', '.join(sent)})" if sent else ""))
    for item in off:
        say(f"  {item['job']} is switched off: {item['why']}")
    return exits.OK


def memory(settings: Settings, args: argparse.Namespace) -> int:
    key = owner_arg(args.owner)
    with runtime_for(settings) as rt:
        service = rt.memory_docs
        if args.op == "read":
            docs = [service.read(key, args.doc)] if args.doc else service.snapshot(key)
            emit([{"doc": d.doc, "scope": d.scope, "version": d.version, "content": d.content}
                  for d in docs], as_json=args.json, columns=["doc", "version", "content"])
            return exits.OK
        if not args.doc or (args.op == "append" and not args.text) or (args.op == "replace" and not args.old):
            raise InvalidPayload("memory append needs --doc and --text; memory replace needs --doc and --old")
        if args.op == "append":
            result = service.append(key, args.doc, args.text)
        elif args.old not in service.read(key, args.doc).content:
            # The service says "duplicate" when the new text is already there (a
            # consolidation patch applied twice); asked by a person, the old text is missing.
            emit({"applied": False, "doc": args.doc, "version": service.read(key, args.doc).version,
                  "reason": "not_found", "error": f"--old does not occur in {args.doc}"},
                 as_json=args.json)
            return exits.NOT_FOUND
        else:
            result = service.replace(key, args.doc, args.old, args.new)
    emit({"applied": result.applied, "doc": result.doc, "version": result.version,
          "reason": result.reason}, as_json=args.json)
    return exits.OK if result.applied else exits.REFUSED


def sessions(settings: Settings, args: argparse.Namespace) -> int:
    with runtime_for(settings) as rt:
        if args.runs:  # the session-end runs: done, failed (with the reason) or running
            runs = rt.sessions.run_records(owner_arg(args.owner), args.days)
            emit([r.as_dict() for r in runs], as_json=args.json,
                 columns=["session_id", "kind", "state", "attempts", "reason", "updated_at"])
            return exits.OK
        recalled = rt.sessions.recall_sessions(owner_arg(args.owner), args.days)
    for item in switched_off(settings):
        if item["job"] == "digest_session":
            # stderr: stdout stays one JSON document with --json
            say(f"memjobs: session digests are switched off: {item['why']}; "
                "only digests kept from before are listed", err=True)
    emit([r.as_dict() for r in recalled], as_json=args.json,
         columns=["session_id", "created_at", "topic", "gist", "tasks"])
    return exits.OK


def task(settings: Settings, args: argparse.Namespace) -> int:
    with runtime_for(settings) as rt:
        rt.client.record_task(args.owner, args.task, args.goal, args.status)
    emit({"task_id": args.task, "status": "queued"}, as_json=args.json)
    return exits.OK


def add_parsers(add: Any) -> None:
    """Register the session-end subcommands with ``add(name, handler, help, listing)``."""
    p = add("end-session", end_session, "queue consolidation, digest and extraction for a session",
            listing=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--session", required=True)
    p.add_argument("--transcript", required=True, help="JSON list of {role, text, ts}")
    p.add_argument("--tasks", help="JSON list of {task_id, goal}")

    p = add("memory", memory, "read or change USER.md / MEMORY.md through the memory service",
            listing=True)
    p.add_argument("op", choices=["read", "append", "replace"])
    p.add_argument("--owner", required=True)
    p.add_argument("--doc", choices=["USER.md", "MEMORY.md"])
    p.add_argument("--text", help="Markdown to append")
    p.add_argument("--old", help="replace: the document's unique text to replace")
    p.add_argument("--new", default="", help="replace: the replacement (empty deletes)")

    p = add("sessions", sessions, "recall an owner's session digests, task status read live",
            listing=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--days", type=int, default=7)
    p.add_argument("--runs", action="store_true",
                   help="list the session-end runs (state, attempts, failure reason) instead")

    p = add("task", task, "report a task's status to the task ledger", listing=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--task", required=True)
    p.add_argument("--goal", required=True)
    p.add_argument("--status", required=True,
                   choices=["dispatched", "running", "succeeded", "failed", "cancelled"])
