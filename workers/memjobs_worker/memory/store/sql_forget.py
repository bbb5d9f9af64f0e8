"""Forgetting in the PostgreSQL ledger: a source marked forgotten at once (its
text cleared), the memories it produced tombstoned, the sources that shared
them sent back to pending. A mixin of :class:`~memjobs_worker.memory.store.sql.SqlStateStore`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from memjobs_worker.clock import Clock
from memjobs_worker.memory.store.base import ForgetResult, forgotten_marker
from memjobs_worker.memory.store.schema import provenance, sources, tombstones
from memjobs_worker.memory.store.sql_rows import tombstone


class SqlForgetting:
    """``forget``, ``tombstones`` and ``clear_tombstones`` of the SQL ledger."""

    clock: Clock

    def _tx(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError

    def _one(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError

    def forget(self, owner_key: str, source_id: str, *, sent_at: datetime) -> ForgetResult:
        now = self.clock()
        with self._tx() as conn:
            row = self._lock_source(conn, owner_key, source_id)
            if row is None:
                # The forget overtook its remember: the marker (StateStore.forget).
                marked = conn.execute(
                    pg_insert(sources)
                    .values(**asdict(forgotten_marker(owner_key, source_id, now)), forgotten_at=sent_at)
                    .on_conflict_do_nothing(index_elements=["owner_key", "source_id"])
                    .returning(sources.c.source_id)
                ).first()
                if marked is not None:
                    return ForgetResult(found=False)
                # A remember committed its insert while we waited on it: forget that row.
                row = self._lock_source(conn, owner_key, source_id)
                assert row is not None
            conn.execute(
                sources.update()
                .where(sources.c.owner_key == owner_key, sources.c.source_id == source_id)
                .values(
                    state="forgotten", text=None, updated_at=now, learned_at=None, forgotten_at=sent_at, reason=None
                )
            )
            memory_ids = [
                r.memory_id
                for r in conn.execute(
                    sa.select(provenance.c.memory_id).where(
                        provenance.c.owner_key == owner_key, provenance.c.source_id == source_id
                    )
                ).all()
            ]
            relearn: list[str] = []
            if memory_ids:
                sharers = [
                    r.source_id
                    for r in conn.execute(
                        sa.select(provenance.c.source_id)
                        .where(
                            provenance.c.owner_key == owner_key,
                            provenance.c.memory_id.in_(memory_ids),
                            provenance.c.source_id != source_id,
                        )
                        .distinct()
                    ).all()
                ]
                conn.execute(
                    provenance.delete().where(
                        provenance.c.owner_key == owner_key, provenance.c.memory_id.in_(memory_ids)
                    )
                )
                if sharers:
                    relearn = [
                        r.source_id
                        for r in conn.execute(
                            sources.update()
                            .where(
                                sources.c.owner_key == owner_key,
                                sources.c.source_id.in_(sharers),
                                sources.c.state == "learned",
                            )
                            .values(state="pending", learned_at=None, updated_at=now)
                            .returning(sources.c.source_id)
                        ).all()
                    ]
                tombstone(conn, owner_key, memory_ids, now)
        return ForgetResult(found=True, memory_ids=memory_ids, relearn=sorted(relearn))

    @staticmethod
    def _lock_source(conn: Connection, owner_key: str, source_id: str) -> Any:
        return conn.execute(
            sa.select(sources.c.state)
            .where(sources.c.owner_key == owner_key, sources.c.source_id == source_id)
            .with_for_update()
        ).first()

    def tombstones(self, owner_key: str) -> list[str]:
        with self._one() as conn:
            rows = conn.execute(sa.select(tombstones.c.memory_id).where(tombstones.c.owner_key == owner_key)).all()
        return [r.memory_id for r in rows]

    def clear_tombstones(self, memory_ids: Sequence[str]) -> None:
        if not memory_ids:
            return
        with self._one() as conn:
            conn.execute(tombstones.delete().where(tombstones.c.memory_id.in_(list(memory_ids))))
