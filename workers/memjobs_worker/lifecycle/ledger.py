"""The personal-memory parts: the ledger (sources, provenance, attempts,
tombstones, the fencing floor) and mem0's memories and vectors."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from memjobs_client.contracts import source_id_for
from memjobs_worker.db.connect import transaction
from memjobs_worker.lifecycle.parts import Owner, OwnerPart, Record, Restoring, StackParts
from memjobs_worker.lifecycle.records import MemoryRecordOut, SourceRecordOut
from memjobs_worker.memory.store.schema import attempts, fencing, provenance, sources, tombstones

if TYPE_CHECKING:
    pass

#: mem0's vector tables: one per vector size (``mem0_memories_<dims>``).
_MEM0_TABLES = "mem0_memories_%"


class LedgerPart(OwnerPart):
    """Sources with their states, dates and text; what the ledger keeps beside them.

    Parameters:
        stack: its state database, and the scheduler that queues the owner's
            extraction after an import with pending sources.
    """

    name = "sources"
    records = {"source": SourceRecordOut}

    def __init__(self, stack: StackParts) -> None:
        self._stack = stack

    def erase(self, owner: Owner) -> int:
        dropped = 0
        with transaction(self._stack.db) as conn:
            # Provenance first: it refers to the sources.
            for table in (provenance, attempts, tombstones, sources, fencing):
                dropped += conn.execute(table.delete().where(table.c.owner_key == owner.key)).rowcount
        return dropped

    def export(self, owner: Owner) -> Iterator[Record]:
        with transaction(self._stack.db) as conn:
            rows = (
                conn.execute(
                    sa.select(sources)
                    .where(sources.c.owner_key == owner.key)
                    .order_by(sources.c.created_at, sources.c.source_id)
                )
                .mappings()
                .all()
            )
        for row in rows:
            yield SourceRecordOut.model_validate(dict(row)).record()

    def restore(self, owner: Owner, records: Sequence[Record], restoring: Restoring) -> int:
        parsed = [SourceRecordOut.model_validate(r) for r in records]
        changed = 0
        pending = False
        with transaction(self._stack.db) as conn:
            for src in parsed:
                # Another owner: the id of a source with text is a function of
                # (owner, text), so that a later remember of it finds it.
                new_id = (
                    source_id_for(owner.key, src.text)
                    if src.text and owner.key != restoring.from_key
                    else src.source_id
                )
                restoring.source_ids[src.source_id] = new_id
                values = src.row(owner.key, new_id)
                inserted = conn.execute(
                    pg_insert(sources)
                    .values(**values)
                    .on_conflict_do_nothing(index_elements=["owner_key", "source_id"])
                    .returning(sources.c.source_id)
                ).first()
                changed += inserted is not None
                pending = pending or (inserted is not None and src.state == "pending")
        if pending:
            self._stack.scheduler.schedule(owner.key, "manual", force=True)
        return changed


class MemoriesPart(OwnerPart):
    """mem0's memories of the owner (their text and vectors), with the sources each came from.

    Erased in SQL, in every vector table, without building mem0 (an erasure
    needs no embedder); exported and restored through the engine (a restored
    memory is embedded by this stack's embedder, as recall will embed queries).
    """

    name = "memories"
    records = {"memory": MemoryRecordOut}

    def __init__(self, stack: StackParts, *, enabled: bool = True) -> None:
        self._stack = stack
        self._enabled = enabled

    def erase(self, owner: Owner) -> int:
        dropped = 0
        with transaction(self._stack.db) as conn:
            tables = conn.execute(
                sa.text(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = current_schema() AND table_name LIKE :p"
                ),
                {"p": _MEM0_TABLES},
            ).scalars()
            for table in list(tables):
                dropped += conn.execute(
                    sa.text(f"DELETE FROM \"{table}\" WHERE payload->>'user_id' = :k"),  # noqa: S608  (a catalogue name)
                    {"k": owner.key},
                ).rowcount
        return dropped

    def export(self, owner: Owner) -> Iterator[Record]:
        if not self._enabled:  # personal memory off: no engine to read them with
            return
        for hit in self._stack.pipeline.memories(owner.key):
            yield MemoryRecordOut(memory_id=hit.memory_id, text=hit.text, source_ids=list(hit.source_ids)).record()

    def restore(self, owner: Owner, records: Sequence[Record], restoring: Restoring) -> int:
        parsed = [MemoryRecordOut.model_validate(r) for r in records]
        if not parsed:
            return 0
        if not self._enabled:
            restoring.notes.append(f"{len(parsed)} memories skipped: personal memory is off here")
            return 0
        engine = self._stack.engine
        present = {hit.text: hit.memory_id for hit in engine.list(owner.key)}
        missing = list(dict.fromkeys(m.text for m in parsed if m.text not in present))
        if missing:
            present.update(zip(missing, engine.restore(owner.key, missing), strict=True))
        links = [
            {"owner_key": owner.key, "memory_id": present[m.text], "source_id": restoring.source_ids.get(sid, sid)}
            for m in parsed
            for sid in m.source_ids
        ]
        with transaction(self._stack.db) as conn:
            known = set(conn.execute(sa.select(sources.c.source_id).where(sources.c.owner_key == owner.key)).scalars())
            for link in links:
                if link["source_id"] in known:
                    conn.execute(pg_insert(provenance).values(**link).on_conflict_do_nothing())
        return len(missing)
