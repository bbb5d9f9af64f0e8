"""The ledger on PostgreSQL, through SQLAlchemy Core.

Every method is one transaction, and as few round trips as it can be: a
statement that is atomic alone runs without BEGIN and COMMIT, an attempt
begins in one statement and commits in two (an extraction batch paid fifteen
round trips to the ledger, each a wait for the reply and then for the GIL
among the worker's threads). Row locks (``FOR UPDATE``) on the sources
serialise a forget against a concurrent commit of the same source: whichever
comes second sees the other's result. Fencing is checked inside the commit's
transaction, so a stale holder's writes never land.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.engine import Connection, Engine

from memjobs_client.contracts import RememberSource
from memjobs_client.errors import StaleFencingToken
from memjobs_worker.clock import Clock, age_ms, utcnow
from memjobs_worker.db.connect import autocommit, run_one, run_rows, transaction
from memjobs_worker.memory.store.base import (
    SOURCE_STATES,
    AddOutcome,
    Attempt,
    CommitResult,
    PendingWindow,
    Produced,
    SourceRecord,
    SourceState,
    StateStore,
    pending_values,
)
from memjobs_worker.memory.store.schema import attempts, fencing, provenance, sources
from memjobs_worker.memory.store.sql_forget import SqlForgetting
from memjobs_worker.memory.store.sql_rows import end_attempt, fence, next_seq, row_record

#: A new source, unless its id is known: built once, its compiled form cached
#: (remember runs it for every source; building it per call cost more than running it).
_INSERT_SOURCE = (
    pg_insert(sources)
    .values(
        {
            name: sa.bindparam(name, type_=sources.c[name].type)
            for name in ("source_id", "owner_key", "state", "kind", "session_id", "text", "created_at", "updated_at")
        }
    )
    .on_conflict_do_nothing(index_elements=["owner_key", "source_id"])
    .returning(sources.c.source_id)
)

#: The same in psycopg's form, for :func:`~memjobs_worker.db.connect.run_one`.
_INSERT_SOURCE_SQL = str(_INSERT_SOURCE.compile(dialect=psycopg_dialect()))  # type: ignore[no-untyped-call]

#: New sources, many in one statement (one round trip and one plan however many
#: remembers came together): the ones written come back.
_INSERT_NEW_SOURCES_SQL = """
INSERT INTO sources (source_id, owner_key, state, kind, session_id, text, created_at, updated_at)
SELECT u.source_id, u.owner_key, 'pending', u.kind, u.session_id, u.text, u.at, u.at
FROM unnest(%(source_ids)s::text[], %(owner_keys)s::text[], %(kinds)s::text[],
            %(session_ids)s::text[], %(texts)s::text[], %(ats)s::timestamptz[])
     AS u(source_id, owner_key, kind, session_id, text, at)
ON CONFLICT (owner_key, source_id) DO NOTHING
RETURNING owner_key, source_id
"""

#: The fencing check as a CTE: the token recorded as the owner's newest, or no
#: row when a newer one has been seen (:func:`~.sql_rows.fence` in SQL).
_FENCED = """fenced AS (
    INSERT INTO fencing (owner_key, token) VALUES (:owner_key, :token)
    ON CONFLICT (owner_key) DO UPDATE SET token = EXCLUDED.token
    WHERE fencing.token <= EXCLUDED.token
    RETURNING token
)"""

#: An attempt begun in one statement (one round trip, where a transaction of
#: three statements took five): the token recorded (the fencing row locked
#: while it runs, as a newer holder's recording would be), the owner's oldest
#: pending sources taken, and, if there are any, the attempt opened on them.
#: One row comes back even when there are none, to say whether the fence let
#: the token through. A backlog (two batches' worth pending or more) is taken
#: in deep batches, the look at it in the same statement; a batch's texts stop at
#: ``batch_bytes`` (its first source goes whatever its size).
_BEGIN_ATTEMPT = sa.text(f"""
WITH {_FENCED}, pending AS (
    -- As many as either question needs: two batches' worth? more than a batch takes?
    SELECT count(*) AS n FROM (
        SELECT 1 FROM sources WHERE owner_key = :owner_key AND state = 'pending'
        LIMIT GREATEST(2 * :batch_size, :batch_size + 1, :deep_batch_size + 1)
    ) AS seen
), oldest AS (
    SELECT * FROM sources
    WHERE owner_key = :owner_key AND state = 'pending' AND EXISTS (SELECT 1 FROM fenced)
    ORDER BY created_at, source_id
    LIMIT CASE
        WHEN :deep_batch_size > :batch_size AND (SELECT n FROM pending) >= 2 * :batch_size THEN :deep_batch_size
        ELSE :batch_size
    END
), batch AS (
    SELECT * FROM (
        SELECT oldest.*,
               row_number() OVER w AS nth,
               sum(coalesce(octet_length(text), 0)) OVER w AS bytes_so_far
        FROM oldest WINDOW w AS (ORDER BY created_at, source_id)
    ) AS counted
    WHERE nth = 1 OR :batch_bytes <= 0 OR bytes_so_far <= :batch_bytes
), opened AS (
    INSERT INTO attempts (attempt_id, owner_key, token, source_ids, state, pid,
                          started_seq, started_at)
    SELECT :attempt_id, :owner_key, :token, json_agg(source_id ORDER BY created_at, source_id),
           'open', :pid, nextval('attempt_events'), :now
    FROM batch
    HAVING count(*) > 0
)
SELECT (SELECT count(*) FROM fenced) > 0 AS fenced,
       (SELECT n FROM pending) > (SELECT count(*) FROM batch) AS more, batch.*
FROM (SELECT 1) AS one LEFT JOIN batch ON true
ORDER BY batch.created_at, batch.source_id
""")  # noqa: S608 - _FENCED is a constant; values are bound

#: The open attempts and the owed deletions of an owner, in one round trip.
_OWED = sa.text("""
SELECT 'attempt' AS kind, attempt_id AS id FROM attempts
WHERE owner_key = :owner_key AND state = 'open'
UNION ALL
SELECT 'tombstone', memory_id FROM tombstones WHERE owner_key = :owner_key
""")

#: A commit's fencing check and row locks in one statement: the token recorded
#: first (a one-time filter), then the batch's sources locked (``FOR UPDATE``
#: serialises a forget of one of them against this commit). No row: refused.
_FENCE_AND_LOCK = sa.text(f"""
WITH {_FENCED}
SELECT source_id, state FROM sources
WHERE owner_key = :owner_key AND source_id = ANY(CAST(:ids AS text[]))
  AND EXISTS (SELECT 1 FROM fenced)
FOR UPDATE OF sources
""")  # noqa: S608 - _FENCED is a constant; values are bound

#: A commit in one statement when every source of the batch is still pending (the
#: common case; one round trip where the transaction below takes four): the token
#: recorded, the batch's sources locked, and only if all of them are there and
#: pending, the provenance links, the sources learned and the attempt's end.
#: ``committed`` false (a source forgotten or gone meanwhile): nothing but the
#: token was written, and the transaction below decides source by source.
_COMMIT_ALL_PENDING = sa.text(f"""
WITH {_FENCED}, locked AS (
    SELECT source_id, state FROM sources
    WHERE owner_key = :owner_key AND source_id = ANY(CAST(:ids AS text[]))
      AND EXISTS (SELECT 1 FROM fenced)
    FOR UPDATE OF sources
), verdict AS (
    SELECT count(*) = cardinality(CAST(:ids AS text[])) AND coalesce(bool_and(state = 'pending'), false) AS ok
    FROM locked
), links AS (
    INSERT INTO provenance (memory_id, source_id, owner_key)
    SELECT m, s, :owner_key
    FROM unnest(CAST(:link_memories AS text[]), CAST(:link_sources AS text[])) AS l(m, s)
    WHERE (SELECT ok FROM verdict)
    ON CONFLICT DO NOTHING
), learned AS (
    UPDATE sources SET state = 'learned', learned_at = :now, updated_at = :now
    WHERE owner_key = :owner_key AND source_id = ANY(CAST(:ids AS text[])) AND (SELECT ok FROM verdict)
), ended AS (
    UPDATE attempts SET state = 'committed', ended_seq = nextval('attempt_events')
    WHERE attempt_id = :attempt_id AND state = 'open' AND (SELECT ok FROM verdict)
)
SELECT EXISTS (SELECT 1 FROM fenced) AS fenced, (SELECT ok FROM verdict) AS committed
""")  # noqa: S608 - _FENCED is a constant; values are bound

#: The rest of a commit in one statement: the provenance links, the learned
#: sources, the tombstones of memories not kept, and the attempt's end.
_COMMIT_ATTEMPT = sa.text("""
WITH links AS (
    INSERT INTO provenance (memory_id, source_id, owner_key)
    SELECT m, s, :owner_key
    FROM unnest(CAST(:link_memories AS text[]), CAST(:link_sources AS text[])) AS l(m, s)
    ON CONFLICT DO NOTHING
), learned AS (
    UPDATE sources SET state = 'learned', learned_at = :now, updated_at = :now
    WHERE owner_key = :owner_key AND source_id = ANY(CAST(:learned AS text[]))
), graves AS (
    INSERT INTO tombstones (memory_id, owner_key, created_at)
    SELECT m, :owner_key, :now FROM unnest(CAST(:discarded AS text[])) AS m
    ON CONFLICT DO NOTHING
)
UPDATE attempts SET state = 'committed', ended_seq = nextval('attempt_events')
WHERE attempt_id = :attempt_id AND state = 'open'
""")


#: The sources of some of an owner's memories, with their states (recall asks for
#: the memories it found: one array parameter, where ``IN`` renders one per id).
_PROVENANCE_OF = sa.text("""
SELECT p.memory_id, p.source_id, s.state FROM provenance p
JOIN sources s ON s.owner_key = p.owner_key AND s.source_id = p.source_id
WHERE p.owner_key = :owner_key AND p.memory_id = ANY(:memory_ids)
ORDER BY p.memory_id, p.source_id
""")


def _learned(rows: Sequence[Any]) -> dict[str, list[str]]:
    """(memory id, source id, state) rows, by memory: those whose sources are all learned."""
    by_memory: dict[str, list[str]] = {}
    not_learned: set[str] = set()
    for memory_id, source_id, state in rows:
        by_memory.setdefault(memory_id, []).append(source_id)
        if state != "learned":
            not_learned.add(memory_id)
    return {m: s for m, s in by_memory.items() if m not in not_learned}


class SqlStateStore(SqlForgetting, StateStore):
    """The ledger in the state database.

    Parameters:
        engine: a SQLAlchemy engine on a migrated database.
        clock: the time source (tests inject one).
    """

    def __init__(self, engine: Engine, *, clock: Clock = utcnow) -> None:
        self.engine = engine
        self.clock = clock

    def _tx(self) -> AbstractContextManager[Connection]:
        return transaction(self.engine)

    def _one(self) -> AbstractContextManager[Connection]:
        """For one statement, atomic alone: one round trip, where a transaction
        around it costs three (BEGIN, the statement, COMMIT)."""
        return autocommit(self.engine)

    # -- sources ---------------------------------------------------------------

    def add_source(self, payload: RememberSource, *, sent_at: datetime) -> AddOutcome:
        now = self.clock()
        values = {
            "source_id": payload.source_id,
            "owner_key": payload.owner_key,
            "state": "pending",
            "kind": payload.kind,
            "session_id": payload.session_id,
            "text": payload.text,
            "created_at": now,
            "updated_at": now,
        }
        # The common case, a new source, is one statement that is atomic alone:
        # one round trip, no transaction around it, and not through SQLAlchemy
        # (see run_one). Rows are keyed by (owner, source id): a row of another
        # owner with the same id is never touched.
        if run_one(self.engine, _INSERT_SOURCE_SQL, values) is not None:
            return "created"
        with self._tx() as conn:
            row = conn.execute(
                sa.select(sources.c.state, sources.c.forgotten_at)
                .where(sources.c.owner_key == payload.owner_key, sources.c.source_id == payload.source_id)
                .with_for_update()
            ).first()
            if row is None:  # gone in between (retention): insert it after all
                return "created" if conn.execute(_INSERT_SOURCE, values).first() is not None else "duplicate"
            if row.state not in ("forgotten", "failed"):
                return "duplicate"
            if row.state == "forgotten" and row.forgotten_at is not None and sent_at <= row.forgotten_at:
                return "forgotten"  # a late or redelivered request: the forget wins
            conn.execute(
                sources.update()
                .where(sources.c.owner_key == payload.owner_key, sources.c.source_id == payload.source_id)
                .values(**pending_values(payload, now), forgotten_at=None)
            )
            return "revived"

    def add_new_sources(self, requests: Sequence[tuple[RememberSource, datetime]]) -> list[bool]:
        # Straight through psycopg in autocommit, as add_source's common case;
        # a request repeated in the batch goes in once, for its first place.
        firsts: dict[tuple[str, str], int] = {}
        for i, (payload, _sent_at) in enumerate(requests):
            firsts.setdefault((payload.owner_key, payload.source_id), i)
        if not firsts:
            return []
        rows = [requests[i][0] for i in firsts.values()]
        written = run_rows(
            self.engine,
            _INSERT_NEW_SOURCES_SQL,
            {
                "source_ids": [p.source_id for p in rows],
                "owner_keys": [p.owner_key for p in rows],
                "kinds": [p.kind for p in rows],
                "session_ids": [p.session_id for p in rows],
                "texts": [p.text for p in rows],
                "ats": [self.clock() for _ in rows],
            },
        )
        new = {firsts[(owner_key, source_id)] for owner_key, source_id in written}
        return [i in new for i in range(len(requests))]

    def list_sources(self, owner_key: str) -> list[SourceRecord]:
        with self._one() as conn:
            rows = conn.execute(
                sa.select(sources)
                .where(sources.c.owner_key == owner_key)
                .order_by(sources.c.created_at, sources.c.source_id)
            ).all()
        return [row_record(r) for r in rows]

    def source_state(self, owner_key: str, source_id: str) -> SourceState | None:
        with self._one() as conn:
            state = conn.execute(
                sa.select(sources.c.state).where(sources.c.owner_key == owner_key, sources.c.source_id == source_id)
            ).scalar()
        return state

    def counts_by_state(self) -> dict[str, int]:
        with self._one() as conn:
            rows = conn.execute(sa.select(sources.c.state, sa.func.count()).group_by(sources.c.state)).all()
        counts: dict[str, int] = dict.fromkeys(SOURCE_STATES, 0)
        counts.update({str(state): int(n) for state, n in rows})
        return counts

    def oldest_pending_at(self) -> datetime | None:
        with self._one() as conn:
            value = conn.execute(
                sa.select(sa.func.min(sources.c.updated_at)).where(sources.c.state == "pending")
            ).scalar()
        return value if isinstance(value, datetime) else None

    def pending_window(self, owner_key: str, *, lookback_ms: int = 0) -> PendingWindow:
        now = self.clock()
        columns: list[Any] = [sa.func.count(), sa.func.min(sources.c.updated_at), sa.func.max(sources.c.updated_at)]
        if lookback_ms > 0:
            # Learned lately: the index's range on updated_at (when it was learned), never the owner's whole history.
            columns.append(
                sa.select(sa.func.max(sources.c.created_at))
                .where(
                    sources.c.owner_key == owner_key,
                    sources.c.state == "learned",
                    sources.c.updated_at >= now - timedelta(milliseconds=lookback_ms),
                )
                .scalar_subquery()
            )
        with self._one() as conn:
            row = conn.execute(
                sa.select(*columns).where(sources.c.owner_key == owner_key, sources.c.state == "pending")
            ).one()
        count, oldest, newest = row[:3]
        if not count:
            return PendingWindow(0, 0, 0)
        previous = row[3] if lookback_ms > 0 else None
        return PendingWindow(
            int(count),
            age_ms(now, oldest),
            age_ms(now, newest),
            age_ms(now, previous) if previous is not None else None,
        )

    def owners_pending_since(self, before: datetime) -> list[str]:
        with self._one() as conn:
            rows = conn.execute(
                sa.select(sources.c.owner_key)
                .where(sources.c.state == "pending", sources.c.updated_at <= before)
                .distinct()
            ).all()
        return [r.owner_key for r in rows]

    # -- extraction attempts ------------------------------------------------------

    def newest_token(self, owner_key: str) -> int:
        with self._one() as conn:
            value = conn.execute(sa.select(fencing.c.token).where(fencing.c.owner_key == owner_key)).scalar()
        return int(value) if value is not None else 0

    def open_attempts(self, owner_key: str) -> list[str]:
        with self._one() as conn:
            rows = conn.execute(
                sa.select(attempts.c.attempt_id).where(attempts.c.owner_key == owner_key, attempts.c.state == "open")
            ).all()
        return [r.attempt_id for r in rows]

    def owed(self, owner_key: str) -> tuple[list[str], list[str]]:
        with self._one() as conn:
            rows = conn.execute(_OWED, {"owner_key": owner_key}).all()
        return ([r.id for r in rows if r.kind == "attempt"], [r.id for r in rows if r.kind == "tombstone"])

    def prune_attempts(self, started_before: datetime) -> int:
        with self._one() as conn:
            return conn.execute(
                attempts.delete().where(attempts.c.state != "open", attempts.c.started_at < started_before)
            ).rowcount

    def close_abandoned(self, owner_key: str, token: int, attempt_ids: Sequence[str]) -> None:
        if not attempt_ids:  # the token recorded, nothing to close: one statement
            with self._one() as conn:
                fence(conn, owner_key, token)
            return
        with self._tx() as conn:
            fence(conn, owner_key, token)
            conn.execute(
                attempts.update()
                .where(attempts.c.attempt_id.in_(list(attempt_ids)), attempts.c.state == "open")
                .values(state="abandoned", ended_seq=next_seq())
            )

    def begin_attempt(
        self, owner_key: str, token: int, batch_size: int, deep_batch_size: int = 0, batch_bytes: int = 0
    ) -> Attempt | None:
        attempt_id = uuid.uuid4().hex
        with self._one() as conn:
            rows = conn.execute(
                _BEGIN_ATTEMPT,
                {
                    "owner_key": owner_key,
                    "token": token,
                    "batch_size": batch_size,
                    "deep_batch_size": deep_batch_size,
                    "batch_bytes": batch_bytes,
                    "attempt_id": attempt_id,
                    "pid": os.getpid(),
                    "now": self.clock(),
                },
            ).all()
        if not rows[0].fenced:
            raise StaleFencingToken(f"fencing token {token} is older than the newest seen")
        if rows[0].source_id is None:
            return None
        batch = tuple(row_record(r) for r in rows)
        return Attempt(attempt_id=attempt_id, owner_key=owner_key, token=token, sources=batch, more=rows[0].more)

    def commit_attempt(self, attempt: Attempt, produced: Sequence[Produced]) -> CommitResult:
        now = self.clock()
        batch_ids = [s.source_id for s in attempt.sources]
        if self._commit_all_pending(attempt, produced, batch_ids, now):
            return CommitResult(learned=batch_ids, discarded=[], still_pending=[])
        with self._tx() as conn:
            states = self._fence_and_lock(conn, attempt, batch_ids)
            discarded: list[str] = []
            blocked: set[str] = set()
            link_memories: list[str] = []
            link_sources: list[str] = []
            for memory in produced:
                if all(states.get(sid) == "pending" for sid in memory.source_ids):
                    link_memories += [memory.memory_id] * len(memory.source_ids)
                    link_sources += memory.source_ids
                else:
                    # Derived (in part) from a source forgotten meanwhile: never
                    # kept; its other sources are learned again without it.
                    discarded.append(memory.memory_id)
                    blocked.update(sid for sid in memory.source_ids if states.get(sid) == "pending")
            learned = [sid for sid in batch_ids if states.get(sid) == "pending" and sid not in blocked]
            conn.execute(
                _COMMIT_ATTEMPT,
                {
                    "owner_key": attempt.owner_key,
                    "attempt_id": attempt.attempt_id,
                    "now": now,
                    "link_memories": link_memories,
                    "link_sources": link_sources,
                    "learned": learned,
                    "discarded": discarded,
                },
            )
        return CommitResult(learned=learned, discarded=discarded, still_pending=sorted(blocked))

    def _commit_all_pending(
        self, attempt: Attempt, produced: Sequence[Produced], batch_ids: list[str], now: datetime
    ) -> bool:
        """The commit in one statement if every source of the batch is still
        pending (:data:`_COMMIT_ALL_PENDING`); whether it was.

        Raises:
            StaleFencingToken: a newer holder has been seen; nothing is written.
        """
        in_batch = set(batch_ids)
        if not all(sid in in_batch for memory in produced for sid in memory.source_ids):
            return False  # (a memory naming another source: the transaction discards it)
        with self._one() as conn:
            row = conn.execute(
                _COMMIT_ALL_PENDING,
                {
                    "owner_key": attempt.owner_key,
                    "token": attempt.token,
                    "ids": batch_ids,
                    "attempt_id": attempt.attempt_id,
                    "now": now,
                    "link_memories": [m.memory_id for m in produced for _ in m.source_ids],
                    "link_sources": [sid for m in produced for sid in m.source_ids],
                },
            ).one()
        if not row.fenced:
            raise StaleFencingToken(f"fencing token {attempt.token} is older than the newest seen")
        return bool(row.committed)

    @staticmethod
    def _fence_and_lock(conn: Connection, attempt: Attempt, batch_ids: list[str]) -> dict[str, str]:
        """The token checked (and recorded) first, then the batch's rows locked,
        in one statement; their states by id.

        Raises:
            StaleFencingToken: a newer holder has been seen for this owner.
        """
        rows = conn.execute(
            _FENCE_AND_LOCK, {"owner_key": attempt.owner_key, "token": attempt.token, "ids": batch_ids}
        ).all()
        if not rows:  # refused, or every source of the batch is gone: the fence says which
            fence(conn, attempt.owner_key, attempt.token)
        return {r.source_id: r.state for r in rows}

    def abort_attempt(self, attempt: Attempt) -> None:
        with self._one() as conn:
            end_attempt(conn, attempt.attempt_id, "aborted")

    def fail_attempt(self, attempt: Attempt, reason: str) -> list[str]:
        batch_ids = [s.source_id for s in attempt.sources]
        with self._tx() as conn:
            fence(conn, attempt.owner_key, attempt.token)
            # The row locks serialise this against a forget, as in commit_attempt.
            failed = (
                conn.execute(
                    sources.update()
                    .where(
                        sources.c.owner_key == attempt.owner_key,
                        sources.c.source_id.in_(batch_ids),
                        sources.c.state == "pending",
                    )
                    .values(state="failed", reason=reason, updated_at=self.clock())
                    .returning(sources.c.source_id)
                )
                .scalars()
                .all()
            )
            end_attempt(conn, attempt.attempt_id, "aborted")
        return sorted(failed)

    # -- reads ------------------------------------------------------------------

    def learned_provenance(self, owner_key: str, memory_ids: Sequence[str] | None = None) -> dict[str, list[str]]:
        if memory_ids is not None:  # recall's check, once per question: a statement built once
            with self._one() as conn:
                rows = conn.execute(_PROVENANCE_OF, {"owner_key": owner_key, "memory_ids": list(memory_ids)}).all()
            return _learned(rows)
        query = (
            sa.select(provenance.c.memory_id, provenance.c.source_id, sources.c.state)
            .join(
                sources,
                sa.and_(sources.c.owner_key == provenance.c.owner_key, sources.c.source_id == provenance.c.source_id),
            )
            .where(provenance.c.owner_key == owner_key)
            .order_by(provenance.c.memory_id, provenance.c.source_id)
        )
        with self._one() as conn:
            rows = conn.execute(query).all()
        return _learned(rows)

    def attempt_events(self, owner_key: str) -> list[tuple[str, int, int | None, str]]:
        """(attempt id, started seq, ended seq, state) in start order: the event log."""
        with self._one() as conn:
            rows = conn.execute(
                sa.select(attempts.c.attempt_id, attempts.c.started_seq, attempts.c.ended_seq, attempts.c.state)
                .where(attempts.c.owner_key == owner_key)
                .order_by(attempts.c.started_seq)
            ).all()
        return [(r.attempt_id, r.started_seq, r.ended_seq, r.state) for r in rows]

    def ping(self) -> None:
        with self._one() as conn:
            conn.execute(sa.text("SELECT 1"))

    def close(self) -> None:
        self.engine.dispose()
