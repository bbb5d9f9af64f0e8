"""The producer commands: remember, forget, end-session, task.

They cost about what importing the producer client costs: each opens the
producer client alone (:func:`~memjobs_worker.cli.door.producer_for`), except
``forget``, which decides at once on the ledger and so opens the door's
runtime (SQLAlchemy and psycopg, no model client, no mem0).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memjobs_client.contracts import ForgetSource
from memjobs_client.errors import InvalidPayload, PermanentError
from memjobs_client.payloads import build_payload
from memjobs_worker.cli import exits
from memjobs_worker.cli.door import owner_arg, producer_for, runtime_for
from memjobs_worker.cli.output import emit, error, for_people, say
from memjobs_worker.settings import SessionSettings, Settings

_NO_MODEL = (
    "no model endpoint is configured (set DASHSCOPE_API_KEY, or QWEN_AUDIO_MEMORY_BASE_URL "
    "for any OpenAI-compatible server)"
)


def remember(settings: Settings, args: argparse.Namespace) -> int:
    with producer_for(settings) as client:
        try:
            source_id = client.remember(args.owner, args.text, session_id=args.session, kind=args.kind)
        except PermanentError as exc:
            if not args.json:
                raise  # one line on stderr: "refused (reason): why"
            emit(
                {"source_id": None, "status": "refused", "reason": exc.reason, "error": for_people(str(exc))},
                as_json=True,
            )
            return exits.REFUSED
    if args.json:
        emit({"source_id": source_id, "status": "queued"}, as_json=True)
    else:
        say(f"queued {source_id}")
    return exits.OK


def forget(settings: Settings, args: argparse.Namespace) -> int:
    """Forget a source at once and queue the purge of its memories, through
    personal memory's one forget path (the HTTP API's too): ``forgotten`` (or
    ``already_forgotten``); a source id the owner does not have is ``not_found``,
    exit 6."""
    key = owner_arg(args.owner)
    build_payload(ForgetSource, owner_key=key, source_id=args.source)  # refused before any backend
    with runtime_for(settings) as rt:
        outcome = rt.personal_memory.forget(args.owner, args.source)
    if outcome.status == "not_found":
        if args.json:
            emit(
                {"source_id": outcome.source_id, "status": "not_found", "error": "this owner has no such source"},
                as_json=True,
            )
        else:
            error(f"not found: this owner has no source {outcome.source_id}")
        return exits.NOT_FOUND
    if args.json:
        emit({"source_id": outcome.source_id, "status": outcome.status, "purge": outcome.purge}, as_json=True)
    else:
        said = outcome.status.replace("_", " ")
        say(
            f"{said} {outcome.source_id}"
            + ("; the deletion of its memories is queued" if outcome.purge == "queued" else "")
        )
    return exits.OK


def switched_off(sessions: SessionSettings, model_configured: bool) -> list[dict[str, str]]:
    """The session-end jobs these settings switch off (``model_configured``:
    :attr:`Settings.model_configured`), each with why."""
    off = []
    if sessions.memory_auto == "off" or not model_configured:
        why = "QWEN_AUDIO_MEMORY_AUTO=off" if sessions.memory_auto == "off" else _NO_MODEL
        off.append({"job": "consolidate_session", "why": why})
    if sessions.session_digest == "off" or not model_configured:
        why = "QWEN_AUDIO_SESSION_DIGEST is off (set it to on)" if sessions.session_digest == "off" else _NO_MODEL
        off.append({"job": "digest_session", "why": why})
    return off


def load_json(value: str, what: str, stdin: list[str]) -> Any:
    """A JSON option's value: ``-`` (stdin, read once: ``stdin`` remembers who
    took it), the JSON itself (a value starting with ``[`` or ``{``), or a file.

    Raises:
        InvalidPayload: unreadable, not JSON, or stdin named twice.
    """
    if value == "-":
        if stdin:
            raise InvalidPayload(f"--{stdin[0]} already reads stdin: give --{what} a file or JSON")
        stdin.append(what)
        text, where = sys.stdin.read(), "stdin"
    elif value.lstrip().startswith(("[", "{")):
        text, where = value, "the inline JSON"
    else:
        try:
            text, where = Path(value).read_text(encoding="utf-8"), f"the file {value}"
        except OSError as exc:
            raise InvalidPayload(f"cannot read the {what} file {value}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidPayload(f"--{what}: {where} is not JSON: {exc.msg} at line {exc.lineno}") from None


def end_session(settings: Settings, args: argparse.Namespace) -> int:
    stdin: list[str] = []
    transcript = load_json(args.transcript, "transcript", stdin)
    tasks = load_json(args.tasks, "tasks", stdin) if args.tasks else []
    if not isinstance(transcript, list) or not isinstance(tasks, list):
        raise InvalidPayload("the transcript and the tasks must be JSON lists")
    with producer_for(settings) as client:
        sent = client.end_session(
            args.owner, args.session, transcript, tasks, consolidate=args.consolidate, digest=args.digest
        )
    opted_out = [
        job
        for job, wanted in (("consolidate_session", args.consolidate), ("digest_session", args.digest))
        if not wanted
    ]
    document: dict[str, Any] = {
        "session_id": args.session,
        "enqueued": sent,
        "status": "queued" if sent else "already_ended",
    }
    if opted_out:
        document["opted_out"] = opted_out
    # Queued all the same: the workers decide with their settings; with these
    # (those of `memjobs up` on this machine) they skip what is switched off.
    off = [item for item in switched_off(settings.sessions, settings.model_configured) if item["job"] not in opted_out]
    if off:
        document["switched_off"] = off
    if args.json:
        emit(document, as_json=True)
        return exits.OK
    say(f"session {args.session}: " + (f"queued {', '.join(sent)}" if sent else "already ended"))
    for job in opted_out:
        say(f"  {job} not queued (opted out)")
    for item in off:
        say(f"  {item['job']} is switched off: {item['why']}; a worker with these settings skips it")
    return exits.OK


def task(settings: Settings, args: argparse.Namespace) -> int:
    with producer_for(settings) as client:
        client.record_task(args.owner, args.task, args.goal, args.status)
    if args.json:
        emit({"task_id": args.task, "status": "queued"}, as_json=True)
    else:
        say(f"queued: task {args.task} is {args.status}")
    return exits.OK


# --- options ----------------------------------------------------------------------


def remember_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--owner", required=True, help="the owner (user) id the source belongs to")
    p.add_argument("--text", required=True, help="what to remember (UTF-8, at most MEMJOBS_MAX_TEXT_BYTES)")
    p.add_argument("--session", default=None, help="the conversation it came from (optional)")
    p.add_argument(
        "--kind",
        choices=["utterance", "explicit"],
        default="utterance",
        help="utterance (default): something the user said in passing, facts are "
        "extracted from it; explicit: the user asked to remember exactly this",
    )


def forget_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--owner", required=True, help="the owner (user) id")
    p.add_argument("--source", required=True, help="the source id to forget (src_…, as remember printed it)")


def end_session_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--owner", required=True, help="the owner (user) id")
    p.add_argument("--session", required=True, help="the session that ended")
    p.add_argument(
        "--transcript",
        required=True,
        metavar="FILE|-|JSON",
        help="the turns, a JSON list of {role, text, ts}: a file, - for stdin, or the JSON itself",
    )
    p.add_argument(
        "--tasks",
        metavar="FILE|-|JSON",
        help="the tasks dispatched, a JSON list of {task_id, goal}: a file, - for stdin, or the JSON itself",
    )
    p.add_argument(
        "--no-consolidate",
        dest="consolidate",
        action="store_false",
        help="do not queue consolidation (queued by default; the workers decide)",
    )
    p.add_argument(
        "--no-digest",
        dest="digest",
        action="store_false",
        help="do not queue the digest (queued by default; the workers decide)",
    )


def task_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--owner", required=True, help="the owner (user) id")
    p.add_argument("--task", required=True, help="the task id")
    p.add_argument("--goal", required=True, help="what the task is for, in a few words")
    p.add_argument(
        "--status",
        required=True,
        help="the task's status now",
        choices=["dispatched", "running", "succeeded", "failed", "cancelled"],
    )
