"""Exactly one run of each session-end job per (owner, session): a leased claim
in the state store.

What: :class:`RunLedger` keeps one ``session_runs`` row per (owner, session,
kind). A delivery :meth:`~RunLedger.claim`\\ s the run in one atomic statement
(``INSERT … ON CONFLICT DO UPDATE … WHERE``): it gets a :class:`RunClaim` only
when there is no row yet, or the row is ``running`` and its lease has expired
(the holder died, or gave the run back after a transient failure). A run
``done`` or ``failed`` is never run again; a run held under a live lease is
someone else's, and the delivery ends as ``duplicate``.

Every run reaches a final state, whatever happens to its messages:

- ``done``: the work committed (:meth:`~RunLedger.finish`);
- ``skipped`` with its reason (``no_model``, ``switched_off``): a worker that
  does not do this work acknowledged it (:meth:`~RunLedger.skip`);
- ``failed`` with its reason: the model answered badly, a permanent error
  (:meth:`~RunLedger.fail`), the message was dead-lettered after its retries
  or refused as invalid (:meth:`~RunLedger.end_dead_lettered`, from
  :class:`~memjobs_worker.sessions.endings.EndRunsOnDeadLetter`), or no
  message was left to finish it a day after its lease ran out (``abandoned``:
  :meth:`~RunLedger.abandon`, from the sweep's retention pass).

A final state is not run again, with one exception: a run ended by a dead
letter names it (``dead_letter``, Dramatiq's message id, which a replay keeps),
and the replay of that letter — an operator asking for another try — may claim
or skip it once more. Nothing else can (a check-back, a duplicate, another
message of the session each have their own id).

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
from dataclasses import asdict, dataclass
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
RunState = Literal["running", "done", "skipped", "failed"]
#: A run still ``running`` this long after its lease ran out has no message left to
#: finish it (Redis lost it: a live one is retried within minutes, within the outage
#: budget at worst), and the sweep ends it ``failed`` as ``abandoned``.
ABANDONED_AFTER = timedelta(days=1)


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
        return {**asdict(self), "updated_at": self.updated_at.isoformat() if self.updated_at else None}


class RunLedger:
    """Leased, fenced run records of session-end jobs (table ``session_runs``)."""

    def __init__(self, engine: Engine, *, clock: Clock = utcnow) -> None:
        self.engine = engine
        self.clock = clock

    def claim(
        self, owner_key: str, session_id: str, kind: RunKind, lease: timedelta, *, letter: str | None = None
    ) -> RunClaim | None:
        """Take the run, or None: it has ended, or it is held under a live lease.

        ``letter``: the delivery's message id; a run that its dead letter ended is
        taken again by that letter's replay (the same message id)."""
        now = self.clock()
        holder = secrets.token_hex(16)
        insert = pg_insert(session_runs).values(
            owner_key=owner_key,
            session_id=session_id,
            kind=kind,
            state="running",
            created_at=now,
            updated_at=now,
            holder=holder,
            lease_until=now + lease,
            attempts=1,
        )
        stmt = insert.on_conflict_do_update(
            index_elements=["owner_key", "session_id", "kind"],
            set_={
                "state": "running",
                "holder": holder,
                "lease_until": now + lease,
                "updated_at": now,
                "dead_letter": None,
                "attempts": session_runs.c.attempts + 1,
            },
            where=_open_to(now, letter),
        ).returning(session_runs.c.attempts)
        with transaction(self.engine) as conn:
            attempt = conn.execute(stmt).scalar()
        if attempt is None:
            return None
        return RunClaim(owner_key, session_id, kind, holder, int(attempt))

    def skip(self, owner_key: str, session_id: str, kind: RunKind, reason: str, *, letter: str | None = None) -> bool:
        """End the run ``skipped`` with ``reason`` (``no_model``, ``switched_off``), when it
        could be claimed (see :meth:`claim`); False when it has ended or is held."""
        now = self.clock()
        ended = {"state": "skipped", "reason": reason, "dead_letter": None}
        return self._end(owner_key, session_id, kind, now, ended, _open_to(now, letter))

    def end_dead_lettered(
        self, owner_key: str, session_id: str, kind: RunKind, reason: str, *, letter: str, holder: str | None = None
    ) -> bool:
        """End the run ``failed`` with ``reason`` because its message ``letter`` was
        dead-lettered; a run with no record gets one. Only a run this message held
        (``holder``, its last claim), or one running under no live lease, is ended:
        a run another delivery holds, or one already done or skipped, is left as it is.
        Returns whether the run now names ``letter`` (so its replay may run it again)."""
        now = self.clock()
        mine = session_runs.c.holder == holder if holder is not None else sa.false()
        ended = {"state": "failed", "reason": reason, "dead_letter": letter}
        return self._end(
            owner_key,
            session_id,
            kind,
            now,
            ended,
            sa.or_(
                sa.and_(session_runs.c.state == "running", sa.or_(mine, _lapsed(now))),
                sa.and_(session_runs.c.state == "failed", mine),  # its holder failed it (permanent)
            ),
        )

    def _end(
        self,
        owner_key: str,
        session_id: str,
        kind: RunKind,
        now: datetime,
        ended: dict[str, Any],
        where: sa.ColumnElement[bool],
    ) -> bool:
        """Give the run the ``ended`` values (its record made if it has none, else
        updated where ``where`` holds), its lease let go; whether it now has them."""
        insert = pg_insert(session_runs).values(
            owner_key=owner_key, session_id=session_id, kind=kind, created_at=now, updated_at=now, attempts=0, **ended
        )
        stmt = insert.on_conflict_do_update(
            index_elements=["owner_key", "session_id", "kind"],
            set_={**ended, "holder": None, "lease_until": None, "updated_at": now},
            where=where,
        ).returning(session_runs.c.attempts)
        with transaction(self.engine) as conn:
            return conn.execute(stmt).first() is not None

    def abandon(self, before: datetime) -> int:
        """End ``failed`` as ``abandoned`` every run still ``running`` whose lease ran
        out before ``before`` (no message is left to finish it): how many."""
        last_seen = sa.func.coalesce(session_runs.c.lease_until, session_runs.c.updated_at, session_runs.c.created_at)
        with transaction(self.engine) as conn:
            return int(
                conn.execute(
                    session_runs.update()
                    .where(session_runs.c.state == "running", last_seen < before)
                    .values(state="failed", reason="abandoned", holder=None, lease_until=None, updated_at=self.clock())
                ).rowcount
            )

    def renew(self, claim: RunClaim, lease: timedelta) -> bool:
        """Extend the lease; False when the claim was taken over or the run ended."""
        now = self.clock()
        return self._fenced(claim, {"lease_until": now + lease, "updated_at": now})

    def release(self, claim: RunClaim, reason: str) -> None:
        """Give the run back after a transient failure: the retry may claim it at once."""
        now = self.clock()
        self._fenced(claim, {"lease_until": now, "updated_at": now, "reason": reason})

    def fail(self, claim: RunClaim, reason: str) -> bool:
        """End the run as ``failed`` with ``reason`` (a code, never text); it is not run
        again, but for a replay of its dead letter. The holder token stays on the row, so
        the dead-lettering of this very delivery can name its letter
        (:meth:`end_dead_lettered`)."""
        return self._fenced(
            claim, {"state": "failed", "reason": reason, "lease_until": None, "updated_at": self.clock()}
        )

    def finish(self, claim: RunClaim, conn: Connection | None = None) -> None:
        """Mark the run ``done`` (inside ``conn``'s transaction when given).

        Raises:
            StaleFencingToken: the claim was taken over; nothing is committed.
        """
        now = self.clock()
        values = {
            "state": "done",
            "reason": None,
            "holder": None,
            "lease_until": None,
            "updated_at": now,
            "done_at": now,
        }
        if not self._fenced(claim, values, conn):
            raise StaleFencingToken(
                "the session run was taken over; this result is dropped", reason="stale_fencing_token"
            )

    def state(self, owner_key: str, session_id: str, kind: RunKind) -> str | None:
        """The run's state (running, done, skipped, failed), or None when it has no record."""
        with transaction(self.engine) as conn:
            return conn.execute(
                sa.select(session_runs.c.state).where(
                    session_runs.c.owner_key == owner_key,
                    session_runs.c.session_id == session_id,
                    session_runs.c.kind == kind,
                )
            ).scalar()

    def holds(self, claim: RunClaim) -> bool:
        """Whether ``claim`` still holds its run (checked before each irreversible step)."""
        with transaction(self.engine) as conn:
            row = conn.execute(sa.select(session_runs.c.holder, session_runs.c.state).where(*_key(claim))).first()
        return row is not None and row.holder == claim.holder and row.state == "running"

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
                except Exception:  # noqa: BLE001, S112 - a failed renewal is retried at the next tick
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
                sa.select(session_runs)
                .where(session_runs.c.owner_key == owner_key, session_runs.c.created_at >= since)
                .order_by(session_runs.c.created_at.desc(), session_runs.c.session_id, session_runs.c.kind)
            ).all()
        return [RunRecord(r.session_id, r.kind, r.state, r.attempts, r.reason, r.updated_at) for r in rows]

    def _fenced(self, claim: RunClaim, values: dict[str, Any], conn: Connection | None = None) -> bool:
        stmt = (
            session_runs.update()
            .where(*_key(claim), session_runs.c.holder == claim.holder, session_runs.c.state == "running")
            .values(**values)
        )
        if conn is not None:
            return bool(conn.execute(stmt).rowcount)
        with transaction(self.engine) as own:
            return bool(own.execute(stmt).rowcount)


def _lapsed(now: datetime) -> sa.ColumnElement[bool]:
    """The run's lease has run out (or it has none)."""
    return sa.or_(session_runs.c.lease_until.is_(None), session_runs.c.lease_until <= now)


def _open_to(now: datetime, letter: str | None) -> sa.ColumnElement[bool]:
    """A delivery (message id ``letter``) may take the run: it is running under no live
    lease, or it failed by this very message's dead letter (the delivery is its replay)."""
    lapsed = sa.and_(session_runs.c.state == "running", _lapsed(now))
    if letter is None:
        return lapsed
    return sa.or_(lapsed, sa.and_(session_runs.c.state == "failed", session_runs.c.dead_letter == letter))


def _key(claim: RunClaim) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        session_runs.c.owner_key == claim.owner_key,
        session_runs.c.session_id == claim.session_id,
        session_runs.c.kind == claim.kind,
    )
