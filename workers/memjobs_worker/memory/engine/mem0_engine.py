"""mem0 as the engine: one ``mem0.Memory`` per worker process.

- Vectors live in the state database through mem0's own pgvector provider, so
  every process and host shares one memory (a collection per vector size, so
  changing the embedder never mixes spaces).
- Telemetry is switched off and ``MEM0_DIR`` points into the data directory
  before mem0 is first imported: nothing is written to ``~/.mem0``.
- The model and the embedder are memjobs' own clients (timeouts, retries,
  metrics) put in place of mem0's; the model behind a check of its replies
  (:mod:`~memjobs_worker.memory.engine.extraction_output`), because mem0 takes a
  reply it cannot parse for "no facts".
- Each owner's memories are found by an index on the owner, and searched
  exactly among them: no HNSW graph over everyone's vectors (see
  :func:`_index_by_owner`).
- mem0's history is not kept at all (no file, no table): memjobs' ledger is
  the record of sources, and mem0's SQLite history lives in one host's data
  directory, where a forget run on another host could not purge the text of a
  forgotten memory. A history file left by an older version is deleted at
  start-up for the same reason.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
import types
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from memjobs_client.errors import BackendUnavailable, MemjobsError
from memjobs_worker.db import advisory
from memjobs_worker.db.outage import RecoveringPool, is_outage, is_read_only_refusal
from memjobs_worker.fulltext import index_tokens
from memjobs_worker.memory.engine.base import MemoryEngine, MemoryHit
from memjobs_worker.memory.engine.extraction_output import CheckedExtractionModel
from memjobs_worker.memory.engine.fused_search import fused_search, patch_mem0_tokens
from memjobs_worker.memory.engine.reembed import check_memory_vectors
from memjobs_worker.memory.engine.turns import stamped
from memjobs_worker.memory.store.base import Produced, SourceRecord

_LIST_LIMIT = 10_000
_import_lock = threading.Lock()


#: mem0's Qdrant settings module: stood in for (see :func:`_without_qdrant`).
_QDRANT_CONFIG = "mem0.configs.vector_stores.qdrant"


def _without_qdrant() -> None:
    """mem0 builds a default ``MemoryConfig()`` as it is imported (a default
    argument), whose vector store defaults to Qdrant, so importing mem0 imports
    ``qdrant_client``: 41 MB and a second and a half of a worker's start, for a
    store memjobs never uses (mem0's vectors live in pgvector). Its settings
    class is stood in for by one that takes any settings; a Qdrant store asked
    for by name would still fail, as it should here."""
    if _QDRANT_CONFIG in sys.modules:
        return
    from pydantic import BaseModel, ConfigDict

    class QdrantConfig(BaseModel):
        """What mem0's default configuration asks for; never a store."""

        model_config = ConfigDict(extra="allow")

    stand_in = types.ModuleType(_QDRANT_CONFIG, "memjobs: Qdrant is not used (mem0_engine._without_qdrant)")
    stand_in.QdrantConfig = QdrantConfig  # type: ignore[attr-defined]
    sys.modules[_QDRANT_CONFIG] = stand_in


def _import_mem0(data_dir: Path) -> Any:
    """Import mem0 with telemetry off, its files in ``data_dir`` and without Qdrant."""
    with _import_lock:
        os.environ["MEM0_TELEMETRY"] = "False"
        os.environ.setdefault("MEM0_DIR", str(data_dir))
        data_dir.mkdir(parents=True, exist_ok=True)
        _without_qdrant()
        import mem0  # noqa: F401  (imported here, after the environment is set)

        # spaCy is optional in mem0 (BM25 lemmas, entity links); memjobs does not
        # install it, so its absence is expected, not worth a warning per process.
        logging.getLogger("mem0.utils.spacy_models").setLevel(logging.ERROR)
        from mem0.memory import main as mem0_main
        from mem0.memory.storage import SQLiteManager

        patch_mem0_tokens(mem0_main)  # each memory's keyword form: knowledge's tokens

        return mem0, SQLiteManager


class Mem0Engine(MemoryEngine):
    """Personal memory on mem0.

    Parameters:
        database_url: a libpq URL of the state database (pgvector).
        data_dir: mem0's directory (``MEM0_DIR``; no history database is kept).
        dims: the embedder's vector size.
        embedder: an object with mem0's ``embed``/``embed_batch`` shape.
        chat: a model with mem0's ``generate_response`` shape, or None to store
            sources verbatim (``infer=False``). mem0 is given it behind
            :class:`CheckedExtractionModel`: a malformed reply is asked again
            once, then ``ModelOutputInvalid`` is raised from :meth:`extract`.
        min_score: memories less similar than this to a question are left out of
            the vector ranking (a keyword match still counts).
        model_id: the embedder's identity (:func:`memjobs_worker.embedding.model_id`):
            checked against the one recorded with the stored vectors, refused
            when they differ (None: no check, for tests on a scratch database).
        idle_close_s: the vector store's connections are closed once unused for
            about this long (None: one is kept open, the others for 10 minutes).
    """

    def __init__(
        self,
        *,
        database_url: str,
        data_dir: Path,
        dims: int,
        embedder: Any,
        chat: Any | None,
        min_score: float = 0.1,
        model_id: str | None = None,
        idle_close_s: float | None = None,
    ) -> None:
        self._data_dir = data_dir
        self._dims = dims
        self._table = f"mem0_memories_{dims}"
        (data_dir / "history.db").unlink(missing_ok=True)  # an older version's, with texts

        # mem0's vector store on connections that commit each statement (or
        # each pipelined batch) by itself: one round trip for a search or an
        # insert, where mem0's own pool wraps each in BEGIN and COMMIT (three).
        # Nothing of an attempt needs mem0's atomicity: a batch the ledger did
        # not commit is deleted whole by its attempt id.
        # A connection the server closed (a restart, a failover) is replaced
        # before use, not handed to mem0 to fail a job with; lost connections
        # are replaced promptly once the server is back (RecoveringPool).
        pool = RecoveringPool(
            conninfo=database_url,
            min_size=0 if idle_close_s else 1,
            max_size=8,
            max_idle=idle_close_s or 600.0,
            timeout=10,
            kwargs={"autocommit": True},
            open=False,
            name="mem0-vectors",
        )
        pool.open(wait=False)
        try:
            _create_collection(database_url, self._table, dims)  # what mem0 makes, before a search needs it
        except psycopg.Error as exc:
            pool.close()
            raise BackendUnavailable(f"mem0's vector store did not answer: {exc}") from exc
        _index_by_owner(database_url, self._table)
        if model_id is not None:
            try:
                check_memory_vectors(database_url, model_id, dims)
            except BaseException:
                pool.close()
                raise
        self._vectors = _TextVectors(embedder)
        self._chat = chat
        self.infers = chat is not None
        self.min_score = min_score
        self._pool = pool
        self._memory: Any = None
        self._memory_lock = threading.Lock()

    @property
    def memory(self) -> Any:
        """mem0's ``Memory``, built on first use: a process that only searches
        (the HTTP API) never imports mem0 (50 MB, docs/benchmarks.md)."""
        with self._memory_lock:
            if self._memory is None:
                self._memory = self._build_memory()
            return self._memory

    def warm(self) -> None:
        self.memory  # noqa: B018 - built now, not in the first extraction

    def _build_memory(self) -> Any:
        mem0, sqlite_manager = _import_mem0(self._data_dir)

        class _NoHistory(sqlite_manager):  # type: ignore[misc, valid-type]
            """mem0's history interface, keeping nothing (in memory, and not even there)."""

            def save_messages(self, messages: Any, session_scope: str) -> None:
                return None

            def get_last_messages(self, session_scope: str, limit: int = 10) -> list[Any]:
                return []

            def add_history(self, *args: Any, **kwargs: Any) -> None:
                return None

            def batch_add_history(self, records: Any) -> None:
                return None

            def purge(self, memory_ids: Sequence[str]) -> None:
                return None

        config = {
            "vector_store": {
                "provider": "pgvector",
                "config": {
                    "connection_pool": self._pool,
                    "collection_name": self._table,
                    "embedding_model_dims": self._dims,
                    "hnsw": False,  # see _index_by_owner
                },
            },
            # Placeholders: both are replaced below by memjobs' own clients.
            "llm": {"provider": "openai", "config": {"api_key": "unused", "model": "unused"}},
            "embedder": {"provider": "openai", "config": {"api_key": "unused"}},
            "history_db_path": ":memory:",
        }
        try:
            memory = mem0.Memory.from_config(config)
        except psycopg.Error as exc:
            raise BackendUnavailable(f"mem0's vector store did not answer: {exc}") from exc
        memory.db.close()
        memory.db = _NoHistory(":memory:")
        memory.embedding_model = self._vectors
        if self._chat is not None:
            memory.llm = CheckedExtractionModel(self._chat)
        return memory

    def extract(self, owner_key: str, attempt_id: str, batch: Sequence[SourceRecord]) -> list[Produced]:
        texts = [(s.source_id, s.text) for s in batch if s.text]
        if not texts:
            return []
        metadata = {"attempt_id": attempt_id}
        with _translated("extraction", self._pool):
            if self.infers:
                # One model call for the whole batch; its memories derive from it all.
                # Each source goes with the day it was said: a batch may span days (a
                # backlog), and mem0's prompt names only the day its module was imported.
                result = self.memory.add(
                    [{"role": "user", "content": stamped(s.text, s.created_at.date())} for s in batch if s.text],
                    user_id=owner_key,
                    metadata=metadata,
                    infer=True,
                )
                batch_ids = tuple(sid for sid, _ in texts)
                return [Produced(m["id"], batch_ids) for m in result["results"]]
            return self._store_verbatim(owner_key, attempt_id, [s for s in batch if s.text])

    def _store_verbatim(self, owner_key: str, attempt_id: str, batch: Sequence[SourceRecord]) -> list[Produced]:
        """Each source as one memory, as mem0's ``add(infer=False)`` would store it
        (the same row: id, vector, payload), but the batch's vectors in one
        embedding call and its rows in one statement: one round trip and one
        transaction for the batch, where mem0 paid one call and one insert a
        source (docs/benchmarks.md, "Verbatim learning")."""
        vectors = self._vectors.embedder.embed_batch([passage_text(s) for s in batch], "add")
        # Distinct times in the batch's order: recall reads a memory's neighbours
        # by creation order (fused_search.similarities), as mem0's one-by-one adds gave.
        now = datetime.now(UTC)
        ids = [str(uuid.uuid4()) for _ in batch]
        payloads = [
            json.dumps(
                verbatim_payload(
                    owner_key, attempt_id, s.source_id, s.text or "", (now + timedelta(microseconds=i)).isoformat()
                )
            )
            for i, s in enumerate(batch)
        ]
        rows = [_VectorDumper.text(v) for v in vectors]
        with self._pool.connection() as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (id, vector, payload) "
                    "SELECT CAST(i AS uuid), CAST(v AS vector), CAST(p AS jsonb) "
                    "FROM unnest(CAST(%s AS text[]), CAST(%s AS text[]), CAST(%s AS text[])) "
                    "AS r(i, v, p)"
                ).format(sql.Identifier(self._table)),
                (ids, rows, payloads),
            )
        return [Produced(memory_id, (s.source_id,)) for memory_id, s in zip(ids, batch, strict=True)]

    def delete(self, owner_key: str, memory_ids: Sequence[str]) -> None:
        with _translated("delete", self._pool):
            for memory_id in memory_ids:
                if self.memory.vector_store.get(vector_id=memory_id) is not None:
                    self.memory.delete(memory_id)
            self.memory.db.purge(memory_ids)

    def delete_attempt(self, owner_key: str, attempt_id: str) -> int:
        with _translated("cleanup", self._pool):
            found = self.memory.get_all(filters={"user_id": owner_key, "attempt_id": attempt_id}, top_k=_LIST_LIMIT)[
                "results"
            ]
        ids = [m["id"] for m in found]
        self.delete(owner_key, ids)
        return len(ids)

    def restore(self, owner_key: str, texts: Sequence[str]) -> list[str]:
        ids: list[str] = []
        vectors = self._vectors
        with _translated("restore", self._pool):
            vectors.prime(list(texts))  # one embedding call for them all
            try:
                for text in texts:
                    result = self.memory.add(text, user_id=owner_key, metadata={"restored": True}, infer=False)
                    ids.append(result["results"][0]["id"])
            finally:
                vectors.prime([])
        return ids

    def search(self, owner_key: str, query: str, limit: int) -> list[MemoryHit]:
        """Vectors and keywords fused (:mod:`~memjobs_worker.memory.engine.fused_search`)."""
        with _translated("search", self._pool):
            vector = self._vectors.embed(query, "search")
            return fused_search(self._pool, self._table, owner_key, query, vector, limit, self.min_score)

    def list(self, owner_key: str) -> list[MemoryHit]:
        with _translated("list", self._pool):
            found = self.memory.get_all(filters={"user_id": owner_key}, top_k=_LIST_LIMIT)["results"]
        return [MemoryHit(m["id"], m["memory"]) for m in found]

    def close(self) -> None:
        # mem0's close() shuts its history database only; the pgvector pool's
        # threads would otherwise keep reconnecting to a database that is gone.
        self._pool.close()
        if self._memory is not None:
            self._memory.close()


def passage_text(source: SourceRecord) -> str:
    """The text embedded for a source stored verbatim: the one place that says
    what a memory's vector is made from (the stored text stays the source's)."""
    return source.text or ""


def verbatim_payload(owner_key: str, attempt_id: str, source_id: str, text: str, created_at: str) -> dict[str, Any]:
    """The payload mem0's ``add(text, user_id=…, metadata=…, infer=False)`` stores
    for one message (mem0 2.x: its metadata, the owner, the role, the text, its
    hash, the times and the keyword form), so every reader of mem0's rows (its
    ``get_all``, fused search, deletes by attempt) finds a batch-stored memory
    as it finds one mem0 stored."""
    return {
        "attempt_id": attempt_id,
        "source_id": source_id,
        "user_id": owner_key,
        "role": "user",
        "data": text,
        "hash": hashlib.md5(text.encode()).hexdigest(),  # noqa: S324 (mem0's hash)
        "created_at": created_at,
        "updated_at": created_at,
        "text_lemmatized": index_tokens(text),
    }


class _Vector(list[float]):
    """An embedding on its way to pgvector, sent in pgvector's text form."""


class _VectorDumper(psycopg.adapt.Dumper):
    """``[0.1,0.2,...]`` in one join. mem0 hands psycopg plain lists, which it
    sends as arrays float by float in Python: the largest single cost of a
    vector insert (and it grows with the vector size). The type is left for
    the server to infer (the column or the ``::vector`` cast says it)."""

    def dump(self, obj: Any) -> bytes:
        return self.text(obj).encode()

    @staticmethod
    def text(vector: Sequence[float]) -> str:
        """pgvector's text form of ``vector``."""
        return "[" + ",".join(map(str, vector)) + "]"


psycopg.adapters.register_dumper(_Vector, _VectorDumper)


class _TextVectors:
    """The embedder as mem0 sees it: the same vectors, as :class:`_Vector`.

    mem0 stores verbatim sources one ``embed`` call each; :meth:`prime` embeds a
    batch's texts in one call first (one model pass for the local model, one
    request for a service), and each ``embed(text, "add")`` of this thread then
    takes its vector from there.
    """

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder
        self._primed = threading.local()

    def prime(self, texts: Sequence[str]) -> None:
        """Embed ``texts`` now, for this thread's next ``embed`` of each (none: forget them)."""
        self._primed.vectors = (
            dict(zip(texts, self.embedder.embed_batch(list(texts), "add"), strict=True)) if texts else {}
        )

    def embed(self, text: Any, memory_action: str | None = None) -> _Vector:
        primed: dict[str, Any] = getattr(self._primed, "vectors", {})
        if memory_action == "add" and text in primed:
            return _Vector(primed.pop(text))
        return _Vector(self.embedder.embed(text, memory_action))

    def embed_batch(self, texts: Sequence[str], memory_action: str | None = None) -> list[_Vector]:
        return [_Vector(v) for v in self.embedder.embed_batch(texts, memory_action)]


def _create_collection(database_url: str, table: str, dims: int) -> None:
    """mem0's pgvector table and its keyword index, as mem0's ``create_col``
    makes them (no vector index: see :func:`_index_by_owner`), if missing; on a
    connection of its own, so that the pool keeps one while idle."""
    with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (id UUID PRIMARY KEY, vector vector({}), payload JSONB)").format(
                sql.Identifier(table), sql.Literal(dims)
            )
        )
        conn.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} USING gin(to_tsvector('simple', payload->>'text_lemmatized'))"
            ).format(sql.Identifier(f"{table}_text_lemmatized_idx"), sql.Identifier(table))
        )


def _index_by_owner(database_url: str, table: str) -> None:
    """Index mem0's vectors by owner instead of by an HNSW graph.

    Every search is one owner's (mem0 filters on ``payload->>'user_id'``). An
    HNSW index over all owners' vectors applies that filter *after* its scan,
    so with many owners it returns fewer hits than asked, often none; and each
    insert into the graph cost about six times a B-tree insert (measured in the
    load figures in docs/benchmarks.md). A B-tree on the owner makes the search exact over
    that owner's memories, which is also cheap at the sizes one person's memory
    reaches. An HNSW index left by an older version is dropped.

    Done once per database, under the schema lock, by the first worker that finds
    it missing; later starts only read the catalogue.
    """
    owner_index, hnsw_index = f"{table}_owner_idx", f"{table}_hnsw_idx"
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            present = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", (table,))}
            if owner_index in present and hnsw_index not in present:
                return
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (advisory.MIGRATIONS,))
                conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(hnsw_index)))
                conn.execute(
                    sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ((payload->>'user_id'))").format(
                        sql.Identifier(owner_index), sql.Identifier(table)
                    )
                )
    except psycopg.OperationalError as exc:
        raise BackendUnavailable(f"mem0's vector store did not answer: {exc}") from exc


class _translated:
    """Turn mem0's and psycopg's errors into memjobs errors at this boundary."""

    def __init__(self, what: str, pool: ConnectionPool[Any] | None = None) -> None:
        self.what = what
        self.pool = pool

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            return
        # A memjobs error anywhere in the chain first (a model outage raised under
        # mem0 is a ModelUnavailable, not the vector store's outage).
        cause: BaseException | None = exc
        while cause is not None:
            if isinstance(cause, MemjobsError):
                raise cause from exc
            cause = cause.__cause__ or cause.__context__
        cause = exc
        while cause is not None:
            if is_read_only_refusal(cause) and self.pool is not None:
                # A failover: this server no longer takes writes. New connections
                # go through the URL's hosts again (target_session_attrs).
                self.pool.drain()
            if is_outage(cause):
                raise BackendUnavailable(f"mem0's vector store did not answer during {self.what}") from exc
            cause = cause.__cause__ or cause.__context__
