"""Exactly one run of each session-end job per (owner, session): a leased claim
in the state store.

What: :class:`RunLedger` keeps one ``session_runs`` row per (owner, session,
kind). A delivery :meth:`~RunLedger.claim`\\ s the run in one atomic statement
(``INSERT … ON CONFLICT DO UPDATE … WHERE``): it gets a :class:`RunClaim` only
when there is no row yet, or the row is ``running`` and its lease has expired
(the holder died, or gave the run back after a transient failure). A run
``done`` or ``failed`` is never run again; a run held under a live lease is
someone else's, and the delivery ends as ``duplicate``.

Why the state store and not Redis: the run's record must outlive Redis
(a lost marker, an emptied Redis) and sit beside the digest it guards, so the
digest and the ``done`` mark commit in one transaction.

While a run works, :meth:`RunLedger.keep` renews its lease in the background;
every write the run makes is fenced by its ``holder`` token, so a holder that
stalled past its lease (and was taken over) commits nothing.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, Engine

from memjobs_client.errors import StaleFencingToken
from memjobs_worker.clock import Clock, utcnow
from memjobs_worker.db.connect import transaction
from memjobs_worker.sessions.schema import session_runs

RunKind = Literal["consolidate", "digest"]
RunState = Literal["running", "done", "failed"]


@dataclass(frozen=True)
class RunClaim:
    """A delivery's hold on a run: the key, its fencing token and which attempt it is."""

    owner_key: str
    session_id: str
    kind: RunKind
    holder: str
    attempt: int


@dataclass(frozen=True)
class RunRecord:
    """A run as ``memjobs sessions --runs`` shows it (no text, only the reason's code)."""

    session_id: str
    kind: str
    state: str
    attempts: int
    reason: str | None
    updated_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "kind": self.kind, "state": self.state,
                "attempts": self.attempts, "reason": self.reason,
                "updated_at": self.updated_at.isoformat() if self.updated_at else None}


class RunLedger:
    """Leased, fenced run records of session-end jobs (table ``session_runs``)."""

    def __init__(self, engine: Engine, *, clock: Clock = utcnow) -> None:
        self.engine = engine
        self.clock = clock

    def claim(self, owner_key: str, session_id: str, kind: RunKind,
              lease: timedelta) -> RunClaim | None:
        """Take the run, or None: it is done, failed, or held under a live lease."""
        now = self.clock()
        holder = secrets.token_hex(16)
        insert = pg_insert(session_runs).values(
            owner_key=owner_key, session_id=session_id, kind=kind, state="running",
            created_at=now, updated_at=now, holder=holder, lease_until=now + lease, attempts=1)
        stmt = insert.on_conflict_do_update(
            index_elements=["owner_key", "session_id", "kind"],
            set_={"holder": holder, "lease_until": now + lease, "updated_at": now,
                  "attempts": session_runs.c.attempts + 1},
            where=sa.and_(session_runs.c.state == "running",
                          sa.or_(session_runs.c.lease_until.is_(None),
                                 session_runs.c.lease_until <= now)),
        ).returning(session_runs.c.attempts)
        with transaction(self.engine) as conn:
            attempt = conn.execute(stmt).scalar()
        if attempt is None:
            return None
        return RunClaim(owner_key, session_id, kind, holder, int(attempt))

    def renew(self, claim: RunClaim, lease: timedelta) -> bool:
        """Extend the lease; False when the claim was taken over or the run ended."""
        now = self.clock()
        return self._fenced(claim, {"lease_until": now + lease, "updated_at": now})

    def release(self, claim: RunClaim, reason: str) -> None:
        """Give the run back after a transient failure: the retry may claim it at once."""
        now = self.clock()
        self._fenced(claim, {"lease_until": now, "updated_at": now, "reason": reason})

    def fail(self, claim: RunClaim, reason: str) -> bool:
        """End the run as ``failed`` with ``reason`` (a code, never text); it is not run again."""
        return self._fenced(claim, {"state": "failed", "reason": reason, "holder": None,
                                    "lease_until": None, "updated_at": self.clock()})

    def finish(self, claim: RunClaim, conn: Connection | None = None) -> None:
        """Mark the run ``done`` (inside ``conn``'s transaction when given).

        Raises:
            StaleFencingToken: the claim was taken over; nothing is committed.
        """
        now = self.clock()
        values = {"state": "done", "reason": None, "holder": None, "lease_until": None,
                  "updated_at": now, "done_at": now}
        if not self._fenced(claim, values, conn):
            raise StaleFencingToken("the session run was taken over; this result is dropped",
                                    reason="stale_fencing_token")

    def state(self, owner_key: str, session_id: str, kind: RunKind) -> str | None:
        """The run's state (running, done, failed), or None when it has no record."""
        with transaction(self.engine) as conn:
            return conn.execute(
                sa.select(session_runs.c.state).where(
                    session_runs.c.owner_key == owner_key, session_runs.c.session_id == session_id,
                    session_runs.c.kind == kind)
            ).scalar()

    def holds(self, claim: RunClaim) -> bool:
        """Whether ``claim`` still holds its run (checked before each irreversible step)."""
        with transaction(self.engine) as conn:
            row = conn.execute(sa.select(session_runs.c.holder).where(*_key(claim))).first()
        return row is not None and row.holder == claim.holder

    @contextmanager
    def keep(self, claim: RunClaim, lease: timedelta) -> Iterator[Callable[[], bool]]:
        """Renew ``claim``'s lease every third of it while the block runs; yields a
        function that says whether the claim is still held (as far as last renewed)."""
        stop = threading.Event()
        held = [True]

        def renew() -> None:
            while not stop.wait(lease.total_seconds() / 3):
                try:
                    held[0] = self.renew(claim, lease)
                except Exception:  # noqa: BLE001 - a failed renewal is retried at the next tick
                    continue
                if not held[0]:
                    return

        thread = threading.Thread(target=renew, name="session-run-lease", daemon=True)
        thread.start()
        try:
            yield lambda: held[0]
        finally:
            stop.set()
            thread.join()

    def records(self, owner_key: str, since: datetime) -> list[RunRecord]:
        """The owner's run records created since ``since``, newest first."""
        with transaction(self.engine) as conn:
            rows = conn.execute(
                sa.select(session_runs).where(session_runs.c.owner_key == owner_key,
                                              session_runs.c.created_at >= since)
                .order_by(session_runs.c.created_at.desc(), session_runs.c.session_id,
                          session_runs.c.kind)
            ).all()
        return [RunRecord(r.session_id, r.kind, r.state, r.attempts, r.reason, r.updated_at)
                for r in rows]

    def _fenced(self, claim: RunClaim, values: dict[str, Any], conn: Connection | None = None) -> bool:
        stmt = (session_runs.update()
                .where(*_key(claim), session_runs.c.holder == claim.holder,
                       session_runs.c.state == "running")
                .values(**values))
        if conn is not None:
            return bool(conn.execute(stmt).rowcount)
        with transaction(self.engine) as own:
            return bool(own.execute(stmt).rowcount)


def _key(claim: RunClaim) -> tuple[sa.ColumnElement[bool], ...]:
    return (session_runs.c.owner_key == claim.owner_key,
            session_runs.c.session_id == claim.session_id, session_runs.c.kind == claim.kind)
