"""Personal memory's parts, built from settings: the ledger store, the engine
(mem0, loaded only when used) and the pipeline."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import redis
from sqlalchemy.engine import Engine

from memjobs_client.errors import MemoryOff
from memjobs_worker.db.connect import libpq_url
from memjobs_worker.lease import redis_leases
from memjobs_worker.memory.engine.base import MemoryEngine
from memjobs_worker.memory.intake import ExtractionScheduler, RedisExtractionScheduler
from memjobs_worker.memory.pipeline import MemoryPipeline
from memjobs_worker.memory.store.base import StateStore
from memjobs_worker.model_breaker import ModelBreaker
from memjobs_worker.settings import EmbeddingSettings, MemorySettings, ModelSettings

if TYPE_CHECKING:
    from memjobs_worker.embedding.fair import ModelShare
    from memjobs_worker.memory.service import PersonalMemory

Enqueue = Callable[[str, dict[str, Any], int | None], None]


class MemoryParts(Protocol):
    """Personal memory's parts in one process, each built when first read (the
    process's :class:`~memjobs_worker.runtime.Runtime` is one): a process that
    takes only ``remember_source`` reads the ledger and the scheduler, never
    the pipeline, so it never loads mem0."""

    @property
    def personal_memory(self) -> PersonalMemory:
        """What every door asks of memory; the actors ask it whether a source was sent."""
        ...

    @property
    def store(self) -> StateStore: ...

    @property
    def scheduler(self) -> ExtractionScheduler: ...

    @property
    def pipeline(self) -> MemoryPipeline: ...

    def model_waiting(self) -> bool:
        """Whether a model call now would be refused (a circuit breaker open:
        :meth:`memjobs_worker.model_breaker.ModelBreaker.waiting`)."""
        ...


def ensure_memory_on(memory: MemorySettings) -> None:
    """Raises:
    MemoryOff: personal memory is switched off (its jobs are refused, nothing allocated).
    """
    if not memory.enabled:
        raise MemoryOff()


def build_engine(
    memory: MemorySettings,
    model: ModelSettings,
    embedding: EmbeddingSettings,
    *,
    database_url: str,
    data_dir: Path,
    breakers: Mapping[str, ModelBreaker] | None = None,
    share: ModelShare | None = None,
    idle_close_s: float | None = None,
) -> MemoryEngine:
    """mem0 on the state database's pgvector (its own files under ``data_dir``), with the configured model and
    embedder (:func:`memjobs_worker.embedding.build_embedder`: the service, the
    local model, or the hashed embedder) behind their circuit ``breakers`` (by
    service: :func:`memjobs_worker.model_breaker.breakers`), refused when the stored
    vectors came from another embedder (``memjobs reembed``). ``share``: the
    process's model slots, shared with its knowledge embedder (a new one when none
    is given). The vector store's connections close once unused for
    ``idle_close_s`` (None: kept).

    Raises:
        MemoryOff: personal memory is switched off.
    """
    ensure_memory_on(memory)
    from memjobs_worker.embedding import build_embedder, model_id
    from memjobs_worker.memory.engine.mem0_engine import Mem0Engine  # mem0 is heavy: only when used
    from memjobs_worker.model_client import chat_model  # openai too

    return Mem0Engine(
        database_url=libpq_url(database_url),
        data_dir=data_dir / "mem0",
        dims=embedding.vector_dims,
        embedder=build_embedder(model, embedding, share, (breakers or {}).get("embed")),
        chat=chat_model(model, embedding, "extract", (breakers or {}).get("chat")),
        min_score=memory.recall_min_score,
        model_id=model_id(embedding),
        idle_close_s=idle_close_s,
    )


def build_scheduler(memory: MemorySettings, redis_client: redis.Redis, enqueue: Enqueue) -> ExtractionScheduler:
    """The per-owner debounced scheduling of ``extract_facts``."""
    return RedisExtractionScheduler(
        redis_client,
        enqueue,
        lease_ms=memory.lease_ms,
        delay_ms=memory.extract_delay_ms,
        marker_ttl_ms=memory.extract_marker_ttl_ms,
    )


def build_pipeline(
    memory: MemorySettings,
    *,
    store: StateStore,
    engine: MemoryEngine,
    redis_client: redis.Redis,
    scheduler: ExtractionScheduler,
    before_batch: Callable[[], None] = lambda: None,
) -> MemoryPipeline:
    """The pipeline; a batch is ``MEMJOBS_EXTRACT_BATCH_SIZE`` sources for a model,
    ``MEMJOBS_VERBATIM_BATCH_SIZE`` when sources are stored as they are (one
    embedding call and one insert a batch, no model call to keep small)."""
    batch_size = memory.extract_batch_size if engine.infers else memory.verbatim_batch_size
    return MemoryPipeline(
        store=store,
        engine=engine,
        leases=redis_leases(redis_client),
        scheduler=scheduler,
        batch_size=batch_size,
        lease_ms=memory.lease_ms,
        max_wait_ms=memory.extract_max_wait_ms,
        deep_batch_size=memory.extract_deep_batch_size if engine.infers else batch_size,
        batch_bytes=memory.extract_batch_bytes if engine.infers else 0,
        before_batch=before_batch,
    )


def open_ledger(db: Engine) -> StateStore:
    """The ledger on a migrated database."""
    from memjobs_worker.memory.store.sql import SqlStateStore

    return SqlStateStore(db)
