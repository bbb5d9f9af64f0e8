"""Erase an owner from every store, and leave only a count behind.

The order, and why:

1. Set the owner's erasure marker (:func:`memjobs_worker.erased.hold`)
   for ``hold_ms``: from now on every worker drops the owner's jobs unrun
   (:class:`memjobs_worker.erased.DropErasedOwners`), so nothing queued during
   the erasure writes the owner's data back. Workers read the markers once a
   second, so the parts wait that long after the marker was set
   (:func:`memjobs_worker.erased.settle`) before they begin.
2. Record that an erasure started (``owner_erasures``: a time and counts,
   never the owner).
3. Walk the parts (:func:`~memjobs_worker.lifecycle.build.owner_parts`) in
   order; the first, the owner's jobs, deletes those stored and waits for
   those running. Each part's count is recorded as it ends.
4. Walk the parts marked :attr:`~memjobs_worker.lifecycle.parts.OwnerPart.again_last`
   once more (a job or a key that a producer added meanwhile), mark the
   record finished, and set the marker again, so the hold runs from the end.

Every part is idempotent: an erasure stopped anywhere (killed, a store
unreachable, jobs still running past the wait) is finished by running it
again; one run twice finds nothing the second time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from memjobs_worker.clock import Clock, utcnow
from memjobs_worker.db.connect import transaction
from memjobs_worker.db.erasures import owner_erasures
from memjobs_worker.erased import hold, settle
from memjobs_worker.lifecycle.parts import Owner, OwnerPart

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EraseReport:
    """How many records each store dropped (the same counts as the erasure's record)."""

    erasure_id: int
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, Any]:
        return {"status": "erased", "erasure_id": self.erasure_id, "counts": self.counts, "total": self.total}


def erase_owner(
    owner: Owner,
    parts: Sequence[OwnerPart],
    *,
    redis_client: redis.Redis,
    db: Engine,
    hold_ms: int,
    clock: Clock = utcnow,
) -> EraseReport:
    """Erase ``owner`` from every part (see the module docstring).

    Raises:
        EraseIncomplete: the owner's jobs were still running past the wait.
        BackendUnavailable: Redis or the database did not answer.
        (In each case, run it again: what was erased stays erased.)
    """
    hold(redis_client, owner.key, hold_ms)
    held_at = time.monotonic()
    with transaction(db) as conn:
        erasure_id = int(
            conn.execute(
                owner_erasures.insert().values(started_at=clock(), counts={}).returning(owner_erasures.c.id)
            ).scalar_one()
        )
    settle(held_at)  # every worker drops the owner's next jobs from here on
    counts = {part.name: 0 for part in parts}
    for part in [*parts, *(p for p in parts if p.again_last)]:
        counts[part.name] += part.erase(owner)
        _record(db, erasure_id, counts)
    _record(db, erasure_id, counts, finished_at=clock())
    hold(redis_client, owner.key, hold_ms)
    log.info("owner erased", extra={"erasure_id": erasure_id, "counts": counts})
    return EraseReport(erasure_id, counts)


def _record(db: Engine, erasure_id: int, counts: dict[str, int], **values: Any) -> None:
    with transaction(db) as conn:
        conn.execute(
            owner_erasures.update().where(owner_erasures.c.id == erasure_id).values(counts=dict(counts), **values)
        )


def erasures(db: Engine, limit: int = 100) -> list[dict[str, Any]]:
    """The latest erasure records: when, and how many records of each store (no owner)."""
    with transaction(db) as conn:
        rows = (
            conn.execute(sa.select(owner_erasures).order_by(owner_erasures.c.id.desc()).limit(limit)).mappings().all()
        )
    return [dict(row) for row in rows]
