"""Session digests, session-end run records and the task ledger on PostgreSQL.

What: :class:`SessionStore` keeps, per owner, one digest per session (topic,
gist, the goals of the tasks dispatched), one run record per (session, kind)
of session-end work, and the live status of every task.

Why this split (DESIGN.md, "Session digest and recall"): a digest freezes only
task *goals*; a status frozen into a digest would silently be wrong a few days
later. Recall therefore joins each goal with the ledger at read time. The
ledger keeps terminal states for ``task_retention_days`` (3); after that recall
says only that the task was dispatched (``status_known=False``).

Retention is exact and clock-driven: a row is expired when its age is strictly
greater than its retention, and reads apply the same cut-off, so what recall
shows never depends on when :meth:`SessionStore.apply_retention` last ran.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, Engine

from memjobs_client.contracts import TERMINAL_TASK_STATUSES, TaskRef, TaskStatus
from memjobs_client.errors import InvalidPayload
from memjobs_client.sensitive import redact_secrets
from memjobs_worker.clock import Clock, utcnow
from memjobs_worker.db.connect import transaction
from memjobs_worker.db.rows import record_of
from memjobs_worker.sessions.runs import ABANDONED_AFTER, RunClaim, RunLedger, RunRecord
from memjobs_worker.sessions.schema import session_digests, session_runs, tasks

log = logging.getLogger(__name__)

#: Digests (and session-end run records) are kept this long, in days.
DIGEST_RETENTION_DAYS = 90
#: A task's record is kept this long after its status became terminal, in days.
TASK_RETENTION_DAYS = 3


@dataclass(frozen=True)
class RecalledTask:
    """A task dispatched in a recalled session.

    ``status`` is read live from the ledger; when the ledger no longer has the
    task it is the literal ``"dispatched"`` and ``status_known`` is False.
    """

    task_id: str
    goal: str
    status: TaskStatus
    status_known: bool


@dataclass(frozen=True)
class SessionRecall:
    """One past session as recall reports it."""

    session_id: str
    created_at: datetime
    topic: str
    gist: str
    tasks: list[RecalledTask]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (ISO-8601 time) for the CLI and the recall tool."""
        return {
            "session_id": self.session_id,
            "created_at": self.created_at.isoformat(),
            "topic": self.topic,
            "gist": self.gist,
            "tasks": [
                {"task_id": t.task_id, "goal": t.goal, "status": t.status, "status_known": t.status_known}
                for t in self.tasks
            ],
        }


@dataclass(frozen=True)
class RetentionReport:
    """How many rows one :meth:`SessionStore.apply_retention` pass deleted, and how many
    runs it ended as ``abandoned``."""

    digests_deleted: int
    tasks_deleted: int
    runs_deleted: int
    runs_abandoned: int = 0


class SessionStore:
    """Session digests, run records and the task ledger in the state database.

    Parameters:
        engine: a SQLAlchemy engine on a database migrated to ``0002_sessions``.
        clock: the time source, returning aware datetimes (tests inject one).
        digest_retention_days: how long digests and run records are kept.
        task_retention_days: how long a task is kept after it became terminal.

    Every method is one transaction; a database that does not answer raises
    :class:`~memjobs_client.errors.BackendUnavailable` (transient).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Clock = utcnow,
        digest_retention_days: int = DIGEST_RETENTION_DAYS,
        task_retention_days: int = TASK_RETENTION_DAYS,
    ) -> None:
        if digest_retention_days < 1 or task_retention_days < 1:
            raise InvalidPayload("retention days must be at least 1")
        self.engine = engine
        self.clock = clock
        self.digest_retention = timedelta(days=digest_retention_days)
        self.task_retention = timedelta(days=task_retention_days)
        #: The session-end run records (claims with a lease), same engine and clock.
        self.runs = RunLedger(engine, clock=clock)

    def _tx(self) -> AbstractContextManager[Connection]:
        return transaction(self.engine)

    def _now(self, now: datetime | None) -> datetime:
        value = self.clock() if now is None else now
        if value.tzinfo is None:
            raise InvalidPayload("times must be timezone-aware")
        return value

    # -- digests and tasks ----------------------------------------------------------

    def save_digest(
        self,
        owner_key: str,
        session_id: str,
        topic: str,
        gist: str,
        task_goals: Sequence[TaskRef],
        *,
        now: datetime | None = None,
        claim: RunClaim | None = None,
    ) -> None:
        """Store (or replace) a session's digest; a replay keeps the first ``created_at``.

        With ``claim``, the digest and the run's ``done`` mark commit together,
        or neither does (the claim was taken over: ``StaleFencingToken``).
        """
        goals = [{"task_id": t.task_id, "goal": redact_secrets(t.goal)} for t in task_goals]
        with self._tx() as conn:
            if claim is not None:
                self.runs.finish(claim, conn)
            conn.execute(
                pg_insert(session_digests)
                .values(
                    owner_key=owner_key,
                    session_id=session_id,
                    topic=topic,
                    gist=gist,
                    task_goals=goals,
                    created_at=self._now(now),
                )
                .on_conflict_do_update(
                    index_elements=["owner_key", "session_id"],
                    set_={"topic": topic, "gist": gist, "task_goals": goals},
                )
            )

    def record_task(self, owner_key: str, task_id: str, goal: str, status: TaskStatus) -> None:
        """Set a task's live status, creating the task if the ledger does not know it.

        ``terminal_at`` is set when the status enters a terminal state (a repeated
        or changed terminal report keeps the first one, so redeliveries do not
        extend retention) and cleared when the status leaves the terminal states.
        """
        now = self.clock()
        goal = redact_secrets(goal)  # a goal said with a password in it keeps the rest
        terminal = status in TERMINAL_TASK_STATUSES
        with self._tx() as conn:
            conn.execute(
                pg_insert(tasks)
                .values(
                    owner_key=owner_key,
                    task_id=task_id,
                    goal=goal,
                    status=status,
                    updated_at=now,
                    terminal_at=now if terminal else None,
                )
                .on_conflict_do_update(
                    index_elements=["owner_key", "task_id"],
                    set_={
                        "goal": goal,
                        "status": status,
                        "updated_at": now,
                        "terminal_at": sa.func.coalesce(tasks.c.terminal_at, now) if terminal else None,
                    },
                )
            )

    def run_records(self, owner_key: str, days: int) -> list[RunRecord]:
        """The owner's session-end runs of the last ``days`` days: state, attempts, reason."""
        if isinstance(days, bool) or not isinstance(days, int) or days < 1:
            raise InvalidPayload("days must be a positive integer")
        return self.runs.records(owner_key, self.clock() - timedelta(days=days))

    # -- recall ---------------------------------------------------------------------

    def recall_sessions(self, owner_key: str, days: int, now: datetime | None = None) -> list[SessionRecall]:
        """The owner's sessions of the last ``days`` days (at most the retention), newest first.

        Raises:
            InvalidPayload: ``days`` is not a positive integer.
        """
        if isinstance(days, bool) or not isinstance(days, int) or days < 1:
            raise InvalidPayload("days must be a positive integer")
        at = self._now(now)
        since = at - min(timedelta(days=days), self.digest_retention)
        with self._tx() as conn:
            rows = conn.execute(
                sa.select(session_digests)
                .where(
                    session_digests.c.owner_key == owner_key,
                    session_digests.c.created_at >= since,
                    session_digests.c.created_at <= at,
                )
                .order_by(session_digests.c.created_at.desc(), session_digests.c.session_id.desc())
            ).all()
            ids = sorted({g["task_id"] for r in rows for g in r.task_goals})
            live: dict[str, str] = {}
            if ids:
                live = {
                    t.task_id: t.status
                    for t in conn.execute(
                        sa.select(tasks.c.task_id, tasks.c.status).where(
                            tasks.c.owner_key == owner_key,
                            tasks.c.task_id.in_(ids),
                            # An expired terminal record counts as gone, swept or not.
                            sa.or_(tasks.c.terminal_at.is_(None), tasks.c.terminal_at >= at - self.task_retention),
                        )
                    ).all()
                }
        return [
            record_of(SessionRecall, r, tasks=[_recalled(g, live.get(g["task_id"])) for g in r.task_goals])
            for r in rows
        ]

    # -- retention ------------------------------------------------------------------

    def apply_retention(self, now: datetime | None = None) -> RetentionReport:
        """Delete what has expired at ``now``: digests and run records older than the
        digest retention, terminal tasks older than the task retention after
        ``terminal_at``. Tasks that are not terminal are never deleted here.
        A run still ``running`` :data:`~memjobs_worker.sessions.runs.ABANDONED_AFTER`
        after its lease ran out has no message left to end it: it ends ``failed``
        as ``abandoned``."""
        at = self._now(now)
        digest_cutoff = at - self.digest_retention
        abandoned = self.runs.abandon(at - ABANDONED_AFTER)
        if abandoned:
            log.warning(
                "session runs abandoned: no message was left to end them",
                extra={"count": abandoned, "reason": "abandoned"},
            )
        with self._tx() as conn:
            digests = conn.execute(
                session_digests.delete().where(session_digests.c.created_at < digest_cutoff)
            ).rowcount
            dropped = conn.execute(
                tasks.delete().where(tasks.c.terminal_at.is_not(None), tasks.c.terminal_at < at - self.task_retention)
            ).rowcount
            runs = conn.execute(session_runs.delete().where(session_runs.c.created_at < digest_cutoff)).rowcount
        return RetentionReport(
            digests_deleted=digests, tasks_deleted=dropped, runs_deleted=runs, runs_abandoned=abandoned
        )


def _recalled(goal: dict[str, str], status: str | None) -> RecalledTask:
    if status is None:
        return RecalledTask(task_id=goal["task_id"], goal=goal["goal"], status="dispatched", status_known=False)
    return RecalledTask(task_id=goal["task_id"], goal=goal["goal"], status=cast(TaskStatus, status), status_known=True)
