"""The sweeper: one maintenance pass (:class:`Sweeper`), and ``memjobs sweep
--every N``, the same pass as a long-running service (:func:`sweep_forever`).

One pass every N seconds (:meth:`Sweeper.once`: pending owners re-enqueued,
retention applied); a failed pass (Redis or the database away) is logged and
the next one tries again. Each pass touches ``<data dir>/run/sweeper.alive``,
which the container and systemd health checks read. SIGTERM or SIGINT ends
the loop after the current pass; a second signal exits at once (a pass is
idempotent: nothing is lost).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType

from memjobs_client.errors import MemjobsError
from memjobs_worker.memory.intake import ExtractionScheduler, sweep
from memjobs_worker.memory.store.base import StateStore
from memjobs_worker.sessions.blackboard import BlackboardStore
from memjobs_worker.sessions.memory_docs.audit import AuditTrail
from memjobs_worker.sessions.store import SessionStore

#: How long an ended extraction attempt is kept (one row per extraction, read
#: only while open): long enough to look into a recent run, not forever.
ATTEMPT_RETENTION = timedelta(days=7)

log = logging.getLogger(__name__)


def alive_file(data_dir: Path) -> Path:
    return data_dir / "run" / "sweeper.alive"


@dataclass(frozen=True)
class Sweeper:
    """One maintenance pass over the parts it is given.

    Parameters:
        store: the ledger, read for owners whose sources wait too long.
        scheduler: re-enqueues those owners' extraction.
        sessions: session state, whose retention the pass applies.
        pending_after_ms: how long a source may stay pending before its owner
            is re-enqueued (``MEMJOBS_SWEEP_PENDING_AFTER_MS``).
        audit: the memory audit trail, pruned to its retention
            (``MEMJOBS_MEMORY_AUDIT_RETENTION_DAYS``); ``None``: not pruned.
        blackboard: the sessions' blackboards, whose entries past their 7 days
            (``MEMJOBS_BLACKBOARD_RETENTION_DAYS``) are deleted; ``None``: not pruned.
    """

    store: StateStore
    scheduler: ExtractionScheduler
    sessions: SessionStore
    pending_after_ms: int
    audit: AuditTrail | None = None
    blackboard: BlackboardStore | None = None

    def once(self) -> dict[str, int]:
        """Re-enqueue owners whose sources are pending too long, then apply
        retention (digests, terminal task records, session runs, memory audit rows,
        blackboard entries past their days, ended extraction attempts)."""
        now = datetime.now(UTC)
        owners = sweep(self.store, self.scheduler, now, self.pending_after_ms)
        expired = self.sessions.apply_retention(now)
        audited = self.audit.prune(now) if self.audit is not None else 0
        boards = self.blackboard.prune(now) if self.blackboard is not None else 0
        attempts = self.store.prune_attempts(now - ATTEMPT_RETENTION)
        return {
            "owners_requeued": owners,
            "digests_deleted": expired.digests_deleted,
            "tasks_deleted": expired.tasks_deleted,
            "session_runs_deleted": expired.runs_deleted,
            "audit_rows_deleted": audited,
            "blackboard_entries_deleted": boards,
            "attempts_deleted": attempts,
        }


def sweep_forever(sweeper: Sweeper, data_dir: Path, every_s: float) -> None:
    """Sweep every ``every_s`` seconds until a SIGTERM/SIGINT."""
    received: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if received:
            os._exit(1)  # a second signal: at once
        received.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    marker = alive_file(data_dir)
    marker.parent.mkdir(parents=True, exist_ok=True)
    while not received:
        try:
            done = sweeper.once()
            marker.touch()
            if done["owners_requeued"]:
                log.info("sweep", extra={"owners_requeued": done["owners_requeued"]})
        except MemjobsError as exc:
            log.warning("sweep failed", extra={"reason": exc.reason})
        deadline = time.monotonic() + every_s
        while not received and time.monotonic() < deadline:
            time.sleep(min(0.2, every_s))
