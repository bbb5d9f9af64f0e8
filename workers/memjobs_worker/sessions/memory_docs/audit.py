"""The memory audit: one row per patch the memory service handled, in the state database.

What each row says: when (``at``), whose (``owner_key``, the sha256, never the
raw id), which document and operation, whether it was applied, why not (a
short reason code), the document's version, who asked (``source``:
``consolidation``, ``memory_tool``, ``cli``, or a gateway's own name) and the
producer's ``session``, ``turn`` and ``trace`` ids when it gave them, and which
host and process wrote it. Never the memory text, nor ``old_text``/``new_text``:
the audit is for diagnosis, and memory text is personal.

Where: the ``memory_audit`` table (migration ``0007_memory_audit``), so every
worker host, the API and the CLI write one trail that outlives any of them
(it was ``memory-audit.jsonl`` in each host's data directory; those files are
no longer written and may be deleted). Rows older than
``MEMJOBS_MEMORY_AUDIT_RETENTION_DAYS`` are deleted by the sweeper
(:meth:`AuditTrail.prune`). ``memjobs audit`` and ``GET /v1/ops/memory-audit``
read it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from memjobs_worker.clock import Clock, utcnow
from memjobs_worker.db.connect import transaction
from memjobs_worker.sessions.memory_docs.protocol import WRITABLE_DOCS, ChangeContext
from memjobs_worker.sessions.schema import memory_audit

#: Document names recorded as given; anything else is recorded as "other"
#: (a name chosen by a model could carry text).
_NAMED_DOCS = frozenset({*WRITABLE_DOCS, "ASSISTANT.md"})
_NAMED_OPS = frozenset({"append", "replace", "-"})
_MAX_ID_CHARS = 128
_MAX_CODE_CHARS = 40
#: Rows one read returns at most.
MAX_READ = 1000


@dataclass(frozen=True)
class AuditEntry:
    """One audited patch (``id`` and ``at`` are set when read back)."""

    owner_key: str
    doc: str
    op: str
    applied: bool
    reason: str | None
    version: int | None
    source: str = "unknown"
    session: str | None = None
    turn: str | None = None
    trace: str | None = None
    host: str | None = None
    pid: int | None = None
    at: datetime | None = None
    id: int | None = None

    @classmethod
    def of(
        cls,
        *,
        owner_key: str,
        doc: str,
        op: str,
        applied: bool,
        reason: str | None,
        version: int | None,
        context: ChangeContext | None,
    ) -> AuditEntry:
        """An entry whose names and codes are safe to keep (no model-chosen text)."""
        ctx = context or ChangeContext("unknown")
        return cls(
            owner_key=owner_key[:_MAX_ID_CHARS],
            doc=doc if doc in _NAMED_DOCS else "other",
            op=op if op in _NAMED_OPS else "other",
            applied=bool(applied),
            reason=reason[:_MAX_CODE_CHARS] if reason is not None else None,
            version=version if isinstance(version, int) and not isinstance(version, bool) else None,
            source=ctx.source,
            session=ctx.session,
            turn=ctx.turn,
            trace=ctx.trace,
        )

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["at"] = self.at.isoformat() if self.at is not None else None
        return out


class AuditTrail:
    """The ``memory_audit`` table: append, read back, prune.

    Parameters:
        engine: the state database's engine (the caller's; never disposed here).
        retention_days: rows older than this are deleted by :meth:`prune`.
        clock: the time source (tests inject one).
    """

    def __init__(self, engine: Engine, *, retention_days: int = 90, clock: Clock = utcnow) -> None:
        self.engine = engine
        self.retention = timedelta(days=retention_days)
        self.clock = clock
        self._host = socket.gethostname()[:_MAX_ID_CHARS]

    def record(self, entries: Sequence[AuditEntry]) -> None:
        """Insert the entries in one transaction.

        Raises:
            BackendUnavailable: the database did not answer (the caller logs it:
                a patch stands even when its audit row is lost).
        """
        if not entries:
            return
        now, pid = self.clock(), os.getpid()
        rows = [
            {
                **{k: v for k, v in asdict(e).items() if k not in ("id", "at", "host", "pid")},
                "at": now,
                "host": self._host,
                "pid": pid,
            }
            for e in entries
        ]
        with transaction(self.engine) as conn:
            conn.execute(memory_audit.insert(), rows)

    def entries(
        self,
        *,
        owner_key: str | None = None,
        session: str | None = None,
        source: str | None = None,
        since: datetime | None = None,
        before_id: int | None = None,
        limit: int = 100,
    ) -> list[AuditEntry]:
        """The latest entries first (``before_id`` pages on), filtered as asked."""
        t = memory_audit
        query = sa.select(t).order_by(t.c.id.desc()).limit(max(1, min(limit, MAX_READ)))
        for column, value in ((t.c.owner_key, owner_key), (t.c.session, session), (t.c.source, source)):
            if value is not None:
                query = query.where(column == value)
        if since is not None:
            query = query.where(t.c.at >= since)
        if before_id is not None:
            query = query.where(t.c.id < before_id)
        with transaction(self.engine) as conn:
            rows = conn.execute(query).mappings().all()
        return [AuditEntry(**dict(row)) for row in rows]

    def entries_after(
        self,
        after_id: int,
        *,
        owner_key: str | None = None,
        session: str | None = None,
        source: str | None = None,
        limit: int = MAX_READ,
    ) -> list[AuditEntry]:
        """The entries after ``after_id``, oldest first (a follower polls with it)."""
        t = memory_audit
        query = sa.select(t).where(t.c.id > after_id).order_by(t.c.id).limit(max(1, min(limit, MAX_READ)))
        for column, value in ((t.c.owner_key, owner_key), (t.c.session, session), (t.c.source, source)):
            if value is not None:
                query = query.where(column == value)
        with transaction(self.engine) as conn:
            rows = conn.execute(query).mappings().all()
        return [AuditEntry(**dict(row)) for row in rows]

    def last_id(self) -> int:
        """The newest entry's id (0 when the trail is empty)."""
        with transaction(self.engine) as conn:
            return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(memory_audit.c.id), 0))).scalar_one())

    def prune(self, now: datetime | None = None) -> int:
        """Delete the rows older than the retention; returns how many."""
        cutoff = (now or self.clock()) - self.retention
        with transaction(self.engine) as conn:
            return int(conn.execute(memory_audit.delete().where(memory_audit.c.at < cutoff)).rowcount)
