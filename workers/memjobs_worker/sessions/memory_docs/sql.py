"""The multi-host memory provider: the ``memory_documents`` table on PostgreSQL.

One row per (owner, doc) with its content and an integer version. ``apply`` is
one transaction: ``SELECT ... FOR UPDATE`` of the row, the version check, then
the update (or an insert that loses cleanly to a concurrent insert). That alone
guarantees no lost update across hosts.

``serialise`` adds a transaction-level advisory lock on the owner, held around
the service's read-then-apply so concurrent writers wait instead of conflicting;
the read and the apply run on the locking connection (one pooled connection
per operation, so many threads cannot starve the pool) and commit together when
the lock is released. A lock not obtained within ``lock_timeout_ms`` is a
:class:`~memjobs_client.errors.BackendUnavailable`, worth retrying.
"""

from __future__ import annotations

import builtins
import contextlib
import threading
from collections.abc import Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, Engine

from memjobs_worker.clock import Clock, utcnow
from memjobs_worker.db import advisory
from memjobs_worker.db.connect import transaction
from memjobs_worker.sessions.memory_docs import protocol
from memjobs_worker.sessions.schema import memory_documents


class SqlMemoryProvider(protocol.MemoryProvider):
    """Memory documents in the state database.

    Parameters:
        engine: a SQLAlchemy engine on a migrated database; it belongs to the
            caller, who disposes it (unless ``dispose_on_close``).
        lock_timeout_ms: how long ``serialise`` waits for another writer.
        clock: the time source of ``updated_at``.
    """

    accepts_owner_keys = True

    def __init__(
        self, engine: Engine, *, lock_timeout_ms: int = 10_000, dispose_on_close: bool = False, clock: Clock = utcnow
    ) -> None:
        self.engine = engine
        self.lock_timeout_ms = int(lock_timeout_ms)
        self.dispose_on_close = dispose_on_close
        self.clock = clock
        self._local = threading.local()

    def describe(self) -> protocol.ProviderInfo:
        return protocol.ProviderInfo(protocol.PROTOCOL_VERSION, "sql", "PostgreSQL memory_documents")

    def _held(self) -> Connection | None:
        conn: Connection | None = getattr(self._local, "conn", None)
        return conn

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Connection]:
        """A transaction: the serialised one this thread holds, else a new one."""
        held = self._held()
        if held is not None:
            yield held
            return
        with transaction(self.engine) as conn:
            yield conn

    @contextlib.contextmanager
    def serialise(self, owner_id: str) -> Iterator[None]:
        key = advisory.owner_lock_key(protocol.storage_key(owner_id))
        if self._held() is not None:
            yield  # reentrant: this thread already holds a serialised transaction
            return
        with self._tx() as conn:
            conn.execute(sa.text(f"SET LOCAL lock_timeout = {self.lock_timeout_ms}"))
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(advisory.MEMORY_DOCUMENTS, key)))
            self._local.conn = conn
            try:
                yield
            finally:
                self._local.conn = None

    def list(self, owner_id: str, options: protocol.ListOptions) -> builtins.list[protocol.Document]:
        t = memory_documents
        key = protocol.storage_key(owner_id)
        with self._tx() as conn:
            rows = conn.execute(
                sa.select(
                    t.c.doc, sa.func.substr(t.c.content, 1, max(options.max_chars, 0)).label("content"), t.c.version
                )
                .where(t.c.owner_key == key, t.c.doc.in_(protocol.WRITABLE_DOCS))
                .order_by(t.c.doc)
                .limit(max(options.max_docs, 0))
            ).all()
        return [protocol.writable_document(r.doc, r.content, r.version) for r in rows]

    def apply(
        self, owner_id: str, changes: Sequence[protocol.Change], context: protocol.ChangeContext
    ) -> protocol.ApplyResult:
        """Every change in one transaction, all of them or none: every version is
        checked (rows locked) before the first write, so a conflict writes nothing
        even inside the service's serialised transaction."""
        protocol.check_writable(changes)
        t = memory_documents
        key = protocol.storage_key(owner_id)
        now = self.clock()
        written: builtins.list[protocol.Document] = []
        with self._tx() as conn:
            found: dict[str, int | None] = {}
            for change in changes:
                current = conn.execute(
                    sa.select(t.c.version).where(t.c.owner_key == key, t.c.doc == change.doc).with_for_update()
                ).scalar()
                found[change.doc] = current if isinstance(current, int) else None
                protocol.check_version(change, found[change.doc] or 0)
            for change in changes:
                current = found[change.doc]
                if current is None:
                    inserted = conn.execute(
                        pg_insert(t)
                        .values(owner_key=key, doc=change.doc, content=change.content, version=1, updated_at=now)
                        .on_conflict_do_nothing(index_elements=["owner_key", "doc"])
                        .returning(t.c.version)
                    ).first()
                    if inserted is None:  # only possible outside serialise: nothing else written yet
                        raise protocol.VersionConflict(f"{change.doc} was created concurrently")
                else:
                    conn.execute(
                        t.update()
                        .where(t.c.owner_key == key, t.c.doc == change.doc)
                        .values(content=change.content, version=current + 1, updated_at=now)
                    )
                found[change.doc] = (current or 0) + 1
                written.append(protocol.writable_document(change.doc, change.content, found[change.doc] or 0))
        return protocol.ApplyResult(len(written), tuple(written))

    def health(self) -> protocol.Health:
        try:
            with self.engine.connect() as conn:
                conn.execute(sa.select(sa.literal(1)).select_from(memory_documents).limit(1))
        except sa.exc.SQLAlchemyError as exc:
            return protocol.Health(False, f"state database: {type(exc).__name__}")
        return protocol.Health(True, "")

    def close(self) -> None:
        if self.dispose_on_close:
            self.engine.dispose()
