"""The session-end parts: USER.md / MEMORY.md (through the memory service and
its provider), digests, tasks and session runs, and the memory audit trail."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from memjobs_worker.db.connect import transaction
from memjobs_worker.lifecycle.parts import Owner, OwnerPart, Record, Restoring, StackParts
from memjobs_worker.lifecycle.records import (
    AuditRecordOut,
    DigestRecordOut,
    DocumentRecordOut,
    TaskRecordOut,
)
from memjobs_worker.sessions.memory_docs import MarkdownFileProvider
from memjobs_worker.sessions.memory_docs.protocol import WRITABLE_DOCS, Change, ChangeContext
from memjobs_worker.sessions.schema import (
    memory_audit,
    memory_documents,
    session_digests,
    session_runs,
    tasks,
)

if TYPE_CHECKING:
    pass

#: The context an import's and an erasure's writes are audited with.
IMPORT_CONTEXT = ChangeContext("import")


class MemoryDocumentsPart(OwnerPart):
    """USER.md and MEMORY.md of the owner, whatever the provider.

    Erased where the provider keeps them: the owner's directory of Markdown
    files (the documents, their versions sidecar and lock file), the state
    database's rows, or, for a host's own provider, each document written
    empty (the provider keeps its own data: erase it there too).
    """

    name = "memory_documents"
    records = {"memory_document": DocumentRecordOut}

    def __init__(self, stack: StackParts) -> None:
        self._stack = stack

    def erase(self, owner: Owner) -> int:
        service = self._stack.memory_docs
        provider = service.provider
        dropped = 0
        if isinstance(provider, MarkdownFileProvider):
            directory = provider.owner_dir(owner.id)
            if directory.exists():
                dropped += sum(1 for p in directory.iterdir() if p.name in WRITABLE_DOCS)
                shutil.rmtree(directory)
        elif not getattr(provider, "accepts_owner_keys", False):  # a host's provider
            written = [d for d in service.snapshot(owner.id) if d.content]
            if written:
                provider.apply(owner.id, [Change(d.doc, "") for d in written], IMPORT_CONTEXT)
                dropped += len(written)
        with transaction(self._stack.db) as conn:  # the SQL provider's, or left by an earlier one
            dropped += conn.execute(memory_documents.delete().where(memory_documents.c.owner_key == owner.key)).rowcount
        return dropped

    def export(self, owner: Owner) -> Iterator[Record]:
        for document in self._stack.memory_docs.snapshot(owner.id):
            if document.version or document.content:
                yield DocumentRecordOut(
                    doc=document.doc,  # type: ignore[arg-type]
                    content=document.content,
                    version=document.version,
                ).record()

    def restore(self, owner: Owner, records: Sequence[Record], restoring: Restoring) -> int:
        service = self._stack.memory_docs
        changed = 0
        for document in (DocumentRecordOut.model_validate(r) for r in records):
            changed += service.restore(owner.id, document.doc, document.content, context=IMPORT_CONTEXT).applied
        return changed


class SessionsPart(OwnerPart):
    """Session digests and the task ledger (exported and restored), and the
    session-end runs (operational state: erased only)."""

    name = "sessions"
    records = {"digest": DigestRecordOut, "task": TaskRecordOut}

    def __init__(self, stack: StackParts) -> None:
        self._stack = stack

    def erase(self, owner: Owner) -> int:
        with transaction(self._stack.db) as conn:
            return sum(
                conn.execute(t.delete().where(t.c.owner_key == owner.key)).rowcount
                for t in (session_digests, tasks, session_runs)
            )

    def export(self, owner: Owner) -> Iterator[Record]:
        with transaction(self._stack.db) as conn:
            digests = (
                conn.execute(
                    sa.select(session_digests)
                    .where(session_digests.c.owner_key == owner.key)
                    .order_by(session_digests.c.created_at)
                )
                .mappings()
                .all()
            )
            owned = (
                conn.execute(
                    sa.select(tasks).where(tasks.c.owner_key == owner.key).order_by(tasks.c.updated_at, tasks.c.task_id)
                )
                .mappings()
                .all()
            )
        for row in digests:
            yield DigestRecordOut.model_validate(dict(row)).record()
        for row in owned:
            yield TaskRecordOut.model_validate(dict(row)).record()

    def restore(self, owner: Owner, records: Sequence[Record], restoring: Restoring) -> int:
        changed = 0
        with transaction(self._stack.db) as conn:
            for record in records:
                model: DigestRecordOut | TaskRecordOut
                if record.get("type") == "digest":
                    model, table, keys = DigestRecordOut.model_validate(record), session_digests, ["session_id"]
                else:
                    model, table, keys = TaskRecordOut.model_validate(record), tasks, ["task_id"]
                values = {**model.model_dump(exclude={"type"}), "owner_key": owner.key}
                changed += (
                    conn.execute(
                        pg_insert(table)
                        .values(**values)
                        .on_conflict_do_nothing(index_elements=["owner_key", *keys])
                        .returning(table.c.owner_key)
                    ).first()
                    is not None
                )
        return changed


class AuditPart(OwnerPart):
    """The memory audit's rows of the owner (never any text). Exported for the
    owner to read; not restored (they are the history of the stack they were
    made on)."""

    name = "memory_audit"
    records = {"audit": AuditRecordOut}

    def __init__(self, stack: StackParts) -> None:
        self._stack = stack

    def erase(self, owner: Owner) -> int:
        with transaction(self._stack.db) as conn:
            return int(conn.execute(memory_audit.delete().where(memory_audit.c.owner_key == owner.key)).rowcount)

    def export(self, owner: Owner) -> Iterator[Record]:
        with transaction(self._stack.db) as conn:
            rows = (
                conn.execute(
                    sa.select(memory_audit).where(memory_audit.c.owner_key == owner.key).order_by(memory_audit.c.id)
                )
                .mappings()
                .all()
            )
        for row in rows:
            yield AuditRecordOut.model_validate(dict(row)).record()
