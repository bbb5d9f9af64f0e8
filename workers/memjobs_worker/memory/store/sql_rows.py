"""Row-level helpers of the PostgreSQL ledger, shared by its modules: the
fencing check, the attempt-event sequence, tombstones and source records."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from memjobs_client.errors import StaleFencingToken
from memjobs_worker.db.rows import record_of
from memjobs_worker.memory.store.base import SourceRecord
from memjobs_worker.memory.store.schema import attempts, fencing, tombstones


def fence(conn: Connection, owner_key: str, token: int) -> None:
    """Record ``token`` as the newest seen for the owner, or refuse an older one."""
    accepted = conn.execute(
        pg_insert(fencing)
        .values(owner_key=owner_key, token=token)
        .on_conflict_do_update(
            index_elements=["owner_key"],
            set_={"token": token},
            where=fencing.c.token <= token,
        )
        .returning(fencing.c.token)
    ).first()
    if accepted is None:
        raise StaleFencingToken(f"fencing token {token} is older than the newest seen")


def next_seq() -> sa.ColumnElement[Any]:
    return sa.func.nextval("attempt_events")


def end_attempt(conn: Connection, attempt_id: str, state: str) -> None:
    conn.execute(
        attempts.update()
        .where(attempts.c.attempt_id == attempt_id, attempts.c.state == "open")
        .values(state=state, ended_seq=next_seq())
    )


def tombstone(conn: Connection, owner_key: str, memory_ids: Sequence[str], now: datetime) -> None:
    conn.execute(
        pg_insert(tombstones)
        .values([{"memory_id": m, "owner_key": owner_key, "created_at": now} for m in memory_ids])
        .on_conflict_do_nothing()
    )


def row_record(row: Any) -> SourceRecord:
    return record_of(SourceRecord, row)
