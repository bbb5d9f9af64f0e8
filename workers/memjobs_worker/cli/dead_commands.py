"""``memjobs dead list | show | retry | purge``: the dead letters, for operators.

A letter is named by its message id (the one job log lines carry) or by its
id in the dead-letter set. Listings carry no text and no owner id (an owner
*key* prefix at most); ``show`` redacts the payload unless ``--reveal``.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from memjobs_client.contracts import QUEUES
from memjobs_client.errors import InvalidPayload
from memjobs_worker.cli import exits
from memjobs_worker.cli.options import limited
from memjobs_worker.cli.output import error, table
from memjobs_worker.endpoints import resolve_endpoints
from memjobs_worker.ops.deadletters import DeadLetters
from memjobs_worker.settings import Settings

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
LIST_COLUMNS = ("message_id", "queue", "actor", "reason", "attempts", "first_failed_at", "last_failed_at", "owner")


def duration_s(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``7d``, ``1w`` in seconds.

    Raises:
        InvalidPayload: anything else.
    """
    match = _DURATION.match(text)
    if match is None:
        raise InvalidPayload(f"--older-than {text!r}: a number with s, m, h, d or w (e.g. 2h)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def options(p: argparse.ArgumentParser) -> None:
    """``dead``'s actions and their options."""
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="every dead letter, the latest first (no text)")
    listing.add_argument("--queue", choices=QUEUES, default=None, help="only this queue's letters")
    listing.add_argument(
        "--limit", type=int, default=None, help="at most this many, the latest first (default: every letter)"
    )
    show = actions.add_parser("show", help="one dead letter, its payload redacted")
    show.add_argument("id", help="message id (or dead-letter id)")
    show.add_argument(
        "--reveal", action="store_true", help="show the payload's text and the error's last line (secrets redacted)"
    )
    retry = actions.add_parser("retry", help="replay on the original queue (jobs are idempotent)")
    which = retry.add_mutually_exclusive_group(required=True)
    which.add_argument("id", nargs="?", help="message id (or dead-letter id)")
    which.add_argument("--queue", choices=QUEUES, help="every letter of this queue")
    which.add_argument("--all", action="store_true", help="every letter of every queue")
    purge = actions.add_parser("purge", help="delete for good")
    purge.add_argument("id", nargs="?", help="message id (or dead-letter id)")
    purge.add_argument("--queue", choices=QUEUES, default=None, help="only this queue")
    purge.add_argument(
        "--older-than", default=None, metavar="DURATION", help="only letters dead longer than this (90s, 15m, 2h, 7d)"
    )
    purge.add_argument("--all", action="store_true", help="every letter (of --queue)")
    for sub in (listing, show, retry, purge):
        sub.add_argument("--json", action="store_true", help="print one JSON document")


@contextmanager
def dead_letters(settings: Settings) -> Iterator[DeadLetters]:
    from memjobs_worker.runtime import open_door  # the broker, as every door builds it

    runtime = open_door(settings, resolve_endpoints(settings.data_dir, settings.redis, settings.database))
    try:
        yield DeadLetters(runtime.redis, runtime.client.broker)
    finally:
        runtime.close()
        runtime.client.close()


def dead(settings: Settings, args: argparse.Namespace) -> int:
    handler = {"list": _list, "show": _show, "retry": _retry, "purge": _purge}[args.action]
    with dead_letters(settings) as letters:
        return handler(letters, args)


def _print(document: Any, as_json: bool, human: str) -> None:
    print(json.dumps(document, ensure_ascii=False, default=str) if as_json else human)


def _list(letters: DeadLetters, args: argparse.Namespace) -> int:
    found = [x.as_dict() for x in limited(letters.letters(args.queue), args, "dead letters")]
    rows = [
        {
            **row,
            **{
                name: row[name][:19].replace("T", " ") if row[name] else None
                for name in ("first_failed_at", "last_failed_at")
            },
        }
        for row in found
    ]
    human = table(rows, LIST_COLUMNS) + f"\n{len(rows)} dead letter(s)" if rows else "no dead letters"
    _print({"dead_letters": found}, args.json, human)
    return exits.OK


def _show(letters: DeadLetters, args: argparse.Namespace) -> int:
    shown = letters.show(args.id, reveal=args.reveal)
    if shown is None:
        error(f"no dead letter {args.id}")
        return exits.NOT_FOUND
    human = "\n".join(
        f"{k}: {json.dumps(v, ensure_ascii=False) if isinstance(v, dict | list) else v}"
        for k, v in shown.items()
        if v is not None
    )
    _print(shown, args.json, human)
    return exits.OK


def _retry(letters: DeadLetters, args: argparse.Namespace) -> int:
    if args.id:
        if not letters.retry(args.id):
            error(f"no dead letter {args.id}")
            return exits.NOT_FOUND
        _print({"retried": 1, "skipped": 0}, args.json, f"retried {args.id}")
        return exits.OK
    retried, skipped = letters.retry_all(args.queue)
    note = f" ({skipped} undecodable, left for purge)" if skipped else ""
    _print({"retried": retried, "skipped": skipped}, args.json, f"retried {retried}{note}")
    return exits.OK


def _purge(letters: DeadLetters, args: argparse.Namespace) -> int:
    if args.id:
        if args.all or args.older_than or args.queue:
            raise InvalidPayload("purge takes an id, or --all / --older-than (with --queue)")
        if not letters.purge(args.id):
            error(f"no dead letter {args.id}")
            return exits.NOT_FOUND
        _print({"purged": 1}, args.json, f"purged {args.id}")
        return exits.OK
    if not args.all and args.older_than is None:
        raise InvalidPayload("purge what? an id, --older-than DURATION or --all")
    older = None if args.older_than is None else duration_s(args.older_than)
    purged = letters.purge_all(args.queue, older_than_s=older)
    _print({"purged": purged}, args.json, f"purged {purged}")
    return exits.OK
