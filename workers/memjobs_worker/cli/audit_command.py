"""``memjobs audit``: read the memory audit trail (the state database's
``memory_audit``, one for every host): whether each patch to USER.md /
MEMORY.md was applied, why not, the version, who asked; never the text.

``--jsonl`` prints the lines of the seeds' ``memory-audit.jsonl`` (the file
each host once wrote), oldest first, and ``--follow`` keeps printing the rows
every host writes after it started, as ``tail -f`` did on the file: it polls
the trail by id (``--poll-ms``).

``--erasures``: the owners' erasures instead (when, and how many records of
each store; never whose: docs/data-lifecycle.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from memjobs_worker.cli import exits
from memjobs_worker.cli.door import owner_arg, runtime_for
from memjobs_worker.cli.output import emit
from memjobs_worker.sessions.memory_docs.audit import MAX_READ, AuditEntry, AuditTrail
from memjobs_worker.settings import Settings

COLUMNS = ["id", "at", "owner_key", "doc", "op", "applied", "reason", "version", "source", "session"]
#: How far back (in ids) a follower looks again: a row whose transaction committed
#: after a newer id was printed is still found (identity ids are taken before commit).
_LOOKBACK_IDS = 256


def jsonl_line(entry: AuditEntry) -> str:
    """One line of the seeds' ``memory-audit.jsonl``: when, whose (sha256), which
    session, document and operation, whether applied, the version and the error
    (the reason a patch was not applied, else null); never the memory text."""
    line = {
        "ts": entry.at.isoformat() if entry.at is not None else None,
        "owner_key": entry.owner_key,
        "session_id": entry.session,
        "doc": entry.doc,
        "op": entry.op,
        "applied": entry.applied,
        "version": entry.version,
        "error": entry.reason,
    }
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


ERASURE_COLUMNS = ["id", "started_at", "finished_at", "total", "counts"]


def audit(settings: Settings, args: argparse.Namespace) -> int:
    if args.erasures:
        return _erasures(settings, args)
    since = datetime.now(UTC) - timedelta(days=args.days) if args.days is not None else None
    filters: dict[str, Any] = {
        "owner_key": owner_arg(args.owner) if args.owner else None,
        "session": args.session,
        "source": args.source,
    }
    with runtime_for(settings) as rt:
        entries = rt.audit.entries(**filters, since=since, before_id=args.before_id, limit=args.limit)
        if args.jsonl or args.follow:
            return _lines(rt.audit, entries, filters, follow=args.follow, poll_s=args.poll_ms / 1000)
    rows = [e.as_dict() for e in entries]
    if not args.json:
        for row in rows:  # the key's first characters are enough to tell owners apart in a table
            row["owner_key"] = row["owner_key"][:12]
            row["at"] = row["at"][:19] if row["at"] else row["at"]
    emit(rows, as_json=args.json, columns=COLUMNS, empty="no audit entries")
    return exits.OK


def _lines(trail: AuditTrail, latest: list[AuditEntry], filters: dict[str, Any], *, follow: bool, poll_s: float) -> int:
    """Print ``latest`` as JSON Lines, oldest first; with ``follow``, then every new row."""
    try:
        for entry in reversed(latest):
            _print(entry)
        if not follow:
            return exits.OK
        last = max((e.id or 0 for e in latest), default=0) or trail.last_id()
        seen = {e.id for e in latest}
        while True:
            found = [e for e in trail.entries_after(max(0, last - _LOOKBACK_IDS), **filters) if e.id not in seen]
            for entry in found:
                _print(entry)
                seen.add(entry.id)
                last = max(last, entry.id or 0)
            seen = {i for i in seen if i is not None and i > last - _LOOKBACK_IDS}
            if len(found) < MAX_READ // 2:
                time.sleep(poll_s)
    except BrokenPipeError:  # the reader went away (`… | head`)
        sys.stderr.close()
        return exits.OK


def _print(entry: AuditEntry) -> None:
    sys.stdout.write(jsonl_line(entry) + "\n")
    sys.stdout.flush()


def _erasures(settings: Settings, args: argparse.Namespace) -> int:
    from memjobs_worker.lifecycle import erasures

    with runtime_for(settings) as rt:
        rows = erasures(rt.db, max(1, min(args.limit, 1000)))
    for row in rows:
        row["total"] = sum(row["counts"].values())
        if not args.json:
            row["counts"] = " ".join(f"{k}={v}" for k, v in row["counts"].items() if v)
    emit(rows, as_json=args.json, columns=ERASURE_COLUMNS, empty="no erasures")
    return exits.OK


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--erasures",
        action="store_true",
        help="list the owners' erasures instead: when, and records per store (never whose)",
    )
    p.add_argument("--owner", help="only this owner (its id; the trail keeps only its sha256)")
    p.add_argument("--session", help="only this session")
    p.add_argument("--source", help="only this source (consolidation, memory_tool, cli, …)")
    p.add_argument("--days", type=float, help="only the last DAYS days")
    p.add_argument("--before-id", type=int, help="entries older than this id (paging)")
    p.add_argument("--limit", type=int, default=50, help="at most this many entries (default 50, max 1000)")
    p.add_argument(
        "--jsonl", action="store_true", help="the lines of the seeds' memory-audit.jsonl, oldest first (never text)"
    )
    p.add_argument(
        "--follow",
        action="store_true",
        help="after the latest entries, print every new one as it is written (JSON Lines), until interrupted",
    )
    p.add_argument("--poll-ms", type=int, default=1000, help="--follow: how often to look for new rows")
