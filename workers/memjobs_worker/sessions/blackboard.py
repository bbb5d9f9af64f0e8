"""The L0 blackboard of a session, in the state database: one store for every host.

The seeds kept each session's blackboard in a SQLite file on the gateway's host
(``NOVA_AUDIO_AGENT_BLACKBOARD_PATH``), so a session resumed on another host
found nothing. Here the gateway appends entries through a job
(``append_blackboard``) and any host restores them (HTTP, the clients).

- **Idempotent by entry id**: (owner, session, entry id) is the key; a
  re-append of an entry changes nothing (the first write wins).
- **Event order**: entries are read back ordered by ``seq`` (the session's
  event counter), then entry id; the order they arrived in does not matter.
- **The seeds' three limits, independent, per session**: an entry lives 7 days
  from its event time ``at``; at most 1,000 entries and 8 MB (the entries'
  JSON, :meth:`~memjobs_client.contracts.BlackboardEntry.size_bytes`) are
  kept; past a limit the oldest entries in event order are dropped first.
  Applied on every append, under a per-session advisory lock so two hosts'
  appends trim one state at a time; a read leaves out entries past their
  7 days, and :meth:`BlackboardStore.prune` deletes them (the sweeper).
- Owners are keyed by sha256 (``owner_key``); :func:`erase_owner` and
  :func:`export_owner` serve an owner's erasure and export.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, Engine

from memjobs_client.contracts import (
    BLACKBOARD_MAX_BYTES,
    BLACKBOARD_MAX_ENTRIES,
    BLACKBOARD_RETENTION_DAYS,
    BlackboardEntry,
)
from memjobs_client.contracts import owner_key as key_of
from memjobs_worker.clock import Clock, utcnow
from memjobs_worker.db.advisory import BLACKBOARD, owner_lock_key
from memjobs_worker.db.connect import transaction
from memjobs_worker.sessions.schema import blackboard_entries as T

#: Entries one page of a restore holds at most, and its bytes (at least one entry).
MAX_PAGE_ENTRIES = 1000
MAX_PAGE_BYTES = 512 * 1024


@dataclass(frozen=True)
class Limits:
    """The three limits of one session's blackboard (the seeds' defaults)."""

    retention_days: int = BLACKBOARD_RETENTION_DAYS
    max_entries: int = BLACKBOARD_MAX_ENTRIES
    max_bytes: int = BLACKBOARD_MAX_BYTES


@dataclass(frozen=True)
class Appended:
    """What an append did: entries new to the session, already there, and dropped by a limit."""

    added: int
    duplicates: int
    dropped: int


@dataclass(frozen=True)
class Page:
    """One page of a session's blackboard, in event order; ``next_after`` is the
    (seq, entry id) to continue after, or None on the last page."""

    entries: list[dict[str, Any]]
    next_after: tuple[int, str] | None


class BlackboardStore:
    """The ``blackboard_entries`` table.

    Parameters:
        engine: the state database's engine (the caller's; never disposed here).
        limits: the three limits (settings ``MEMJOBS_BLACKBOARD_*``).
        clock: the time source (tests inject one).
    """

    def __init__(self, engine: Engine, *, limits: Limits | None = None, clock: Clock = utcnow) -> None:
        self.engine = engine
        self.limits = limits or Limits()
        self.clock = clock

    def append(self, owner_key: str, session_id: str, entries: Sequence[BlackboardEntry]) -> Appended:
        """Store the entries the session does not have yet, then apply the limits.

        Raises:
            BackendUnavailable: the database did not answer (the job is retried).
        """
        now = self.clock()
        rows = [
            {
                "owner_key": owner_key,
                "session_id": session_id,
                "entry_id": e.entry_id,
                "seq": e.seq,
                "at": e.at,
                "trust": e.trust,
                "priority": e.priority,
                "kind": e.kind,
                "result": e.result,
                "evidence": list(e.evidence),
                "size_bytes": e.size_bytes(),
                "stored_at": now,
            }
            for e in entries
        ]
        unique = list({r["entry_id"]: r for r in reversed(rows)}.values())  # the first of each id
        with transaction(self.engine) as conn:
            _lock(conn, owner_key, session_id)
            added = 0
            if unique:
                insert = (
                    pg_insert(T)
                    .values(unique)
                    .on_conflict_do_nothing(index_elements=[T.c.owner_key, T.c.session_id, T.c.entry_id])
                    .returning(T.c.entry_id)
                )
                added = len(conn.execute(insert).all())
            dropped = self._trim(conn, owner_key, session_id, now)
        return Appended(added=added, duplicates=len(rows) - added, dropped=dropped)

    def _trim(self, conn: Connection, owner_key: str, session_id: str, now: datetime) -> int:
        """Apply the three limits to one session: past 7 days, then beyond the
        newest ``max_entries``, then beyond the newest ``max_bytes``."""
        session = sa.and_(T.c.owner_key == owner_key, T.c.session_id == session_id)
        cutoff = now - timedelta(days=self.limits.retention_days)
        dropped = int(conn.execute(sa.delete(T).where(session, T.c.at < cutoff)).rowcount)
        newest_first = (T.c.seq.desc(), T.c.entry_id.desc())
        ranked = (
            sa.select(
                T.c.entry_id,
                sa.func.row_number().over(order_by=newest_first).label("n"),
                sa.func.sum(T.c.size_bytes).over(order_by=newest_first, rows=(None, 0)).label("total"),
            )
            .where(session)
            .subquery()
        )
        over = sa.select(ranked.c.entry_id).where(
            sa.or_(ranked.c.n > self.limits.max_entries, ranked.c.total > self.limits.max_bytes)
        )
        dropped += int(conn.execute(sa.delete(T).where(session, T.c.entry_id.in_(over))).rowcount)
        return dropped

    def page(
        self,
        owner_key: str,
        session_id: str,
        *,
        after: tuple[int, str] | None = None,
        limit: int = MAX_PAGE_ENTRIES,
        max_bytes: int = MAX_PAGE_BYTES,
    ) -> Page:
        """The session's live entries in event order, from after ``after``, one page
        (at most ``limit`` entries and about ``max_bytes``, always at least one)."""
        cutoff = self.clock() - timedelta(days=self.limits.retention_days)
        limit = max(1, min(limit, MAX_PAGE_ENTRIES))
        query = (
            sa.select(T)
            .where(T.c.owner_key == owner_key, T.c.session_id == session_id, T.c.at >= cutoff)
            .order_by(T.c.seq, T.c.entry_id)
            .limit(limit + 1)
        )
        if after is not None:
            query = query.where(sa.tuple_(T.c.seq, T.c.entry_id) > sa.tuple_(*after))
        with transaction(self.engine) as conn:
            rows = conn.execute(query).mappings().all()
        out: list[dict[str, Any]] = []
        size = 0
        for row in rows[:limit]:
            if out and size + int(row["size_bytes"]) > max_bytes:
                break
            out.append(as_entry(row))
            size += int(row["size_bytes"])
        more = len(out) < len(rows)
        return Page(out, (out[-1]["seq"], out[-1]["entry_id"]) if more and out else None)

    def restore(self, owner_key: str, session_id: str) -> list[dict[str, Any]]:
        """Every live entry of the session, in event order (all pages)."""
        entries: list[dict[str, Any]] = []
        after: tuple[int, str] | None = None
        while True:
            page = self.page(owner_key, session_id, after=after)
            entries.extend(page.entries)
            if page.next_after is None:
                return entries
            after = page.next_after

    def prune(self, now: datetime | None = None) -> int:
        """Delete every session's entries past their 7 days; returns how many."""
        cutoff = (now or self.clock()) - timedelta(days=self.limits.retention_days)
        with transaction(self.engine) as conn:
            return int(conn.execute(sa.delete(T).where(T.c.at < cutoff)).rowcount)


def as_entry(row: Any) -> dict[str, Any]:
    """A stored row as the entry the gateway appended (JSON-ready)."""
    return {
        "entry_id": row["entry_id"],
        "seq": int(row["seq"]),
        "at": row["at"].isoformat(),
        "trust": row["trust"],
        "priority": int(row["priority"]),
        "kind": row["kind"],
        "result": row["result"],
        "evidence": list(row["evidence"]),
    }


def _lock(conn: Connection, owner_key: str, session_id: str) -> None:
    session_key = hashlib.sha256(f"{owner_key}:{session_id}".encode()).hexdigest()
    conn.execute(
        sa.text("SELECT pg_advisory_xact_lock(:cls, :key)"), {"cls": BLACKBOARD, "key": owner_lock_key(session_key)}
    )


def erase_owner(conn: Connection, owner_id: str) -> int:
    """Delete every blackboard entry of the owner (all sessions), in the caller's
    transaction; returns how many. For the erasure of an owner."""
    return int(conn.execute(sa.delete(T).where(T.c.owner_key == key_of(owner_id))).rowcount)


def export_owner(conn: Connection, owner_id: str) -> dict[str, list[dict[str, Any]]]:
    """The owner's blackboards, ``{session id: entries in event order}``, in the
    caller's transaction. For the export of an owner (entries past their 7 days
    included until pruned: the export shows what is stored)."""
    rows = (
        conn.execute(
            sa.select(T).where(T.c.owner_key == key_of(owner_id)).order_by(T.c.session_id, T.c.seq, T.c.entry_id)
        )
        .mappings()
        .all()
    )
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["session_id"], []).append(as_entry(row))
    return out
