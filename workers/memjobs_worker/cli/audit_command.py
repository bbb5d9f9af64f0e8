"""``memjobs audit``: read the memory audit trail (the state database's
``memory_audit``, one for every host): whether each patch to USER.md /
MEMORY.md was applied, why not, the version, who asked; never the text.
``--erasures``: the owners' erasures instead (when, and how many records of
each store; never whose: docs/data-lifecycle.md)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

from memjobs_worker.cli import exits
from memjobs_worker.cli.door import owner_arg, runtime_for
from memjobs_worker.cli.output import emit
from memjobs_worker.settings import Settings

COLUMNS = ["id", "at", "owner_key", "doc", "op", "applied", "reason", "version", "source", "session"]


ERASURE_COLUMNS = ["id", "started_at", "finished_at", "total", "counts"]


def audit(settings: Settings, args: argparse.Namespace) -> int:
    if args.erasures:
        return _erasures(settings, args)
    since = datetime.now(UTC) - timedelta(days=args.days) if args.days is not None else None
    with runtime_for(settings) as rt:
        entries = rt.audit.entries(owner_key=owner_arg(args.owner) if args.owner else None,
                                   session=args.session, source=args.source, since=since,
                                   before_id=args.before_id, limit=args.limit)
    rows = [e.as_dict() for e in entries]
    if not args.json:
        for row in rows:  # the key's first characters are enough to tell owners apart in a table
            row["owner_key"] = row["owner_key"][:12]
            row["at"] = row["at"][:19] if row["at"] else row["at"]
    emit(rows, as_json=args.json, columns=COLUMNS, empty="no audit entries")
    return exits.OK


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
    p.add_argument("--erasures", action="store_true",
                   help="list the owners' erasures instead: when, and records per store (never whose)")
    p.add_argument("--owner", help="only this owner (its id; the trail keeps only its sha256)")
    p.add_argument("--session", help="only this session")
    p.add_argument("--source", help="only this source (consolidation, memory_tool, cli, …)")
    p.add_argument("--days", type=float, help="only the last DAYS days")
    p.add_argument("--before-id", type=int, help="entries older than this id (paging)")
    p.add_argument("--limit", type=int, default=50, help="at most this many entries (default 50, max 1000)")
