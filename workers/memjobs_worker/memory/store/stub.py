"""The ledger in process memory: the state store's twin for tests.

Like dramatiq's ``StubBroker``, it does not pretend to be a database: it keeps
dicts behind one lock. It honours every contract of
:class:`~memjobs_worker.memory.store.base.StateStore` that
:class:`~memjobs_worker.memory.store.sql.SqlStateStore` honours — the same
outcomes, the same fencing (a token older than the newest seen for the owner is
refused with :class:`~memjobs_client.errors.StaleFencingToken` and nothing is
written), the same attempt log, tombstones and counts — and
``tests/memory/test_store_contract.py`` runs one suite against both. Each method holds
the lock for its whole body, so a method is as atomic as the SQL store's one
transaction. Nothing survives the process, and nothing is shared between hosts:
fencing, concurrency and fault tests stay on PostgreSQL.
"""

from __future__ import annotations

import itertools
import os
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from memjobs_client.contracts import RememberSource
from memjobs_client.errors import StaleFencingToken
from memjobs_worker.clock import Clock, age_ms, utcnow
from memjobs_worker.memory.store.base import (
    SOURCE_STATES,
    AddOutcome,
    Attempt,
    CommitResult,
    ForgetResult,
    PendingWindow,
    Produced,
    SourceRecord,
    SourceState,
    StateStore,
    forgotten_marker,
    pending_values,
)


@dataclass
class _Row:
    """A source row: the public record plus when it was forgotten."""

    record: SourceRecord
    forgotten_at: datetime | None = None


@dataclass
class _AttemptRow:
    attempt_id: str
    owner_key: str
    token: int
    source_ids: tuple[str, ...]
    state: str  # open | committed | aborted | abandoned
    pid: int
    started_seq: int
    started_at: datetime
    ended_seq: int | None = None


class InMemoryStateStore(StateStore):
    """The ledger in dicts, thread-safe.

    Parameters:
        clock: the time source (tests inject one), as for the SQL store.
    """

    def __init__(self, *, clock: Clock = utcnow) -> None:
        self.clock = clock
        self._lock = threading.RLock()
        #: (owner key, source id) → row: keyed by owner, as the SQL table.
        self._sources: dict[tuple[str, str], _Row] = {}
        #: (owner key, memory id, source id), as the provenance table.
        self._provenance: set[tuple[str, str, str]] = set()
        self._fencing: dict[str, int] = {}
        self._attempts: dict[str, _AttemptRow] = {}
        self._tombstones: dict[str, str] = {}  # memory id → owner key
        self._seq = itertools.count(1)

    # -- sources ---------------------------------------------------------------

    def add_source(self, payload: RememberSource, *, sent_at: datetime) -> AddOutcome:
        now = self.clock()
        with self._lock:
            row = self._sources.get((payload.owner_key, payload.source_id))
            if row is None:
                self._sources[(payload.owner_key, payload.source_id)] = _Row(
                    SourceRecord(
                        source_id=payload.source_id,
                        owner_key=payload.owner_key,
                        created_at=now,
                        **pending_values(payload, now),
                    )
                )
                return "created"
            if row.record.state not in ("forgotten", "failed"):
                return "duplicate"
            if row.record.state == "forgotten" and row.forgotten_at is not None and sent_at <= row.forgotten_at:
                return "forgotten"  # a late or redelivered request: the forget wins
            row.record = replace(row.record, **pending_values(payload, now))
            row.forgotten_at = None
            return "revived"

    def list_sources(self, owner_key: str) -> list[SourceRecord]:
        with self._lock:
            return sorted((r.record for r in self._sources.values() if r.record.owner_key == owner_key), key=_age)

    def source_state(self, owner_key: str, source_id: str) -> SourceState | None:
        with self._lock:
            row = self._sources.get((owner_key, source_id))
            return None if row is None else row.record.state

    def counts_by_state(self) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(SOURCE_STATES, 0)
        with self._lock:
            for row in self._sources.values():
                counts[row.record.state] += 1
        return counts

    def oldest_pending_at(self) -> datetime | None:
        with self._lock:
            return min(
                (r.record.updated_at for r in self._sources.values() if r.record.state == "pending"), default=None
            )

    def pending_window(self, owner_key: str, *, lookback_ms: int = 0) -> PendingWindow:
        with self._lock:
            now = self.clock()
            mine = [r.record for r in self._sources.values() if r.record.owner_key == owner_key]
            times = [r.updated_at for r in mine if r.state == "pending"]
            if not times:
                return PendingWindow(0, 0, 0)
            since = now - timedelta(milliseconds=lookback_ms)
            previous = max(
                (r.created_at for r in mine if lookback_ms > 0 and r.state == "learned" and r.updated_at >= since),
                default=None,
            )
            return PendingWindow(
                len(times),
                age_ms(now, min(times)),
                age_ms(now, max(times)),
                age_ms(now, previous) if previous is not None else None,
            )

    def owners_pending_since(self, before: datetime) -> list[str]:
        with self._lock:
            return sorted(
                {
                    r.record.owner_key
                    for r in self._sources.values()
                    if r.record.state == "pending" and r.record.updated_at <= before
                }
            )

    # -- extraction attempts ------------------------------------------------------

    def open_attempts(self, owner_key: str) -> list[str]:
        with self._lock:
            return [a.attempt_id for a in self._attempts.values() if a.owner_key == owner_key and a.state == "open"]

    def newest_token(self, owner_key: str) -> int:
        with self._lock:
            return self._fencing.get(owner_key, 0)

    def close_abandoned(self, owner_key: str, token: int, attempt_ids: Sequence[str]) -> None:
        with self._lock:
            self._fence(owner_key, token)  # recorded even with nothing to close
            for attempt_id in attempt_ids:
                self._end_attempt(attempt_id, "abandoned")

    def prune_attempts(self, started_before: datetime) -> int:
        with self._lock:
            ended = [
                a.attempt_id for a in self._attempts.values() if a.state != "open" and a.started_at < started_before
            ]
            for attempt_id in ended:
                del self._attempts[attempt_id]
            return len(ended)

    def begin_attempt(
        self, owner_key: str, token: int, batch_size: int, deep_batch_size: int = 0, batch_bytes: int = 0
    ) -> Attempt | None:
        with self._lock:
            self._fence(owner_key, token)
            pending = sorted(
                (
                    r.record
                    for r in self._sources.values()
                    if r.record.owner_key == owner_key and r.record.state == "pending"
                ),
                key=_age,
            )
            if len(pending) >= 2 * batch_size:
                batch_size = max(batch_size, deep_batch_size)
            batch = within_bytes(pending[:batch_size], batch_bytes)
            if not batch:
                return None
            attempt_id = uuid.uuid4().hex
            self._attempts[attempt_id] = _AttemptRow(
                attempt_id=attempt_id,
                owner_key=owner_key,
                token=token,
                source_ids=tuple(s.source_id for s in batch),
                state="open",
                pid=os.getpid(),
                started_seq=next(self._seq),
                started_at=self.clock(),
            )
        return Attempt(
            attempt_id=attempt_id, owner_key=owner_key, token=token, sources=batch, more=len(pending) > len(batch)
        )

    def commit_attempt(self, attempt: Attempt, produced: Sequence[Produced]) -> CommitResult:
        now = self.clock()
        batch_ids = [s.source_id for s in attempt.sources]
        with self._lock:
            self._fence(attempt.owner_key, attempt.token)
            owner = attempt.owner_key
            states = {
                sid: self._sources[(owner, sid)].record.state for sid in batch_ids if (owner, sid) in self._sources
            }
            discarded: list[str] = []
            blocked: set[str] = set()
            for memory in produced:
                if all(states.get(sid) == "pending" for sid in memory.source_ids):
                    self._provenance.update((owner, memory.memory_id, sid) for sid in memory.source_ids)
                else:
                    # Derived (in part) from a source forgotten meanwhile: never
                    # kept; its other sources are learned again without it.
                    discarded.append(memory.memory_id)
                    blocked.update(sid for sid in memory.source_ids if states.get(sid) == "pending")
            learned = [sid for sid in batch_ids if states.get(sid) == "pending" and sid not in blocked]
            for sid in learned:
                row = self._sources[(owner, sid)]
                row.record = replace(row.record, state="learned", learned_at=now, updated_at=now)
            for memory_id in discarded:
                self._tombstones.setdefault(memory_id, attempt.owner_key)
            self._end_attempt(attempt.attempt_id, "committed")
        return CommitResult(learned=learned, discarded=discarded, still_pending=sorted(blocked))

    def abort_attempt(self, attempt: Attempt) -> None:
        with self._lock:
            self._end_attempt(attempt.attempt_id, "aborted")

    def fail_attempt(self, attempt: Attempt, reason: str) -> list[str]:
        now = self.clock()
        with self._lock:
            self._fence(attempt.owner_key, attempt.token)
            failed = []
            for source in attempt.sources:
                row = self._sources.get((attempt.owner_key, source.source_id))
                if row is not None and row.record.state == "pending":
                    row.record = replace(row.record, state="failed", reason=reason, updated_at=now)
                    failed.append(source.source_id)
            self._end_attempt(attempt.attempt_id, "aborted")
        return sorted(failed)

    def attempt_events(self, owner_key: str) -> list[tuple[str, int, int | None, str]]:
        with self._lock:
            rows = sorted((a for a in self._attempts.values() if a.owner_key == owner_key), key=lambda a: a.started_seq)
            return [(a.attempt_id, a.started_seq, a.ended_seq, a.state) for a in rows]

    # -- forgetting ---------------------------------------------------------------

    def forget(self, owner_key: str, source_id: str, *, sent_at: datetime) -> ForgetResult:
        now = self.clock()
        with self._lock:
            row = self._sources.get((owner_key, source_id))
            if row is None:
                # The forget overtook its remember: the marker (StateStore.forget).
                self._sources[(owner_key, source_id)] = _Row(
                    forgotten_marker(owner_key, source_id, now), forgotten_at=sent_at
                )
                return ForgetResult(found=False)
            row.record = replace(row.record, state="forgotten", text=None, updated_at=now, learned_at=None, reason=None)
            row.forgotten_at = sent_at
            mine = [(m, s) for o, m, s in self._provenance if o == owner_key]
            memory_ids = sorted({m for m, s in mine if s == source_id})
            sharers = {s for m, s in mine if m in memory_ids and s != source_id}
            self._provenance -= {(owner_key, m, s) for m, s in mine if m in memory_ids}
            relearn: list[str] = []
            for sid in sharers:
                shared = self._sources.get((owner_key, sid))
                if shared is not None and shared.record.state == "learned":
                    shared.record = replace(shared.record, state="pending", learned_at=None, updated_at=now)
                    relearn.append(sid)
            for memory_id in memory_ids:
                self._tombstones.setdefault(memory_id, owner_key)
        return ForgetResult(found=True, memory_ids=memory_ids, relearn=sorted(relearn))

    def tombstones(self, owner_key: str) -> list[str]:
        with self._lock:
            return [m for m, owner in self._tombstones.items() if owner == owner_key]

    def clear_tombstones(self, memory_ids: Sequence[str]) -> None:
        with self._lock:
            for memory_id in memory_ids:
                self._tombstones.pop(memory_id, None)

    # -- reads ------------------------------------------------------------------

    def learned_provenance(self, owner_key: str, memory_ids: Sequence[str] | None = None) -> dict[str, list[str]]:
        wanted = None if memory_ids is None else set(memory_ids)
        by_memory: dict[str, list[str]] = {}
        not_learned: set[str] = set()
        with self._lock:
            for owner, memory_id, source_id in sorted(self._provenance):
                row = self._sources.get((owner, source_id))
                if owner != owner_key or row is None or (wanted is not None and memory_id not in wanted):
                    continue
                by_memory.setdefault(memory_id, []).append(source_id)
                if row.record.state != "learned":
                    not_learned.add(memory_id)
        return {m: s for m, s in by_memory.items() if m not in not_learned}

    def ping(self) -> None:
        return None

    def close(self) -> None:
        """Nothing to release; the data stays readable, as a disposed SQL engine reconnects."""

    # -- helpers (called with the lock held) -------------------------------------

    def _fence(self, owner_key: str, token: int) -> None:
        """Record ``token`` as the newest seen for the owner, or refuse an older one."""
        if token < self._fencing.get(owner_key, token):
            raise StaleFencingToken(f"fencing token {token} is older than the newest seen")
        self._fencing[owner_key] = token

    def _end_attempt(self, attempt_id: str, state: str) -> None:
        attempt = self._attempts.get(attempt_id)
        if attempt is not None and attempt.state == "open":
            attempt.state = state
            attempt.ended_seq = next(self._seq)


def _age(record: SourceRecord) -> tuple[datetime, str]:
    """The ledger's order: oldest first, then by id (as the SQL store's ORDER BY)."""
    return (record.created_at, record.source_id)


def within_bytes(batch: Sequence[SourceRecord], batch_bytes: int) -> tuple[SourceRecord, ...]:
    """``batch`` up to the source that would take its texts' UTF-8 bytes past
    ``batch_bytes`` (the first goes whatever its size; 0: no bound), as the SQL
    store's window does."""
    taken: list[SourceRecord] = []
    total = 0
    for record in batch:
        total += len((record.text or "").encode())
        if taken and 0 < batch_bytes < total:
            break
        taken.append(record)
    return tuple(taken)
