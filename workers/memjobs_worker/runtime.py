"""A process's wiring: settings in, store, engine and pipeline out.

Built once per process at its entry point (a worker process, a CLI command) and
passed down; nothing here reads the environment.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import redis
from dramatiq.brokers.redis import RedisBroker
from pydantic import SecretStr

from memjobs_client.client import MemjobsClient
from memjobs_client.connect import Durability, redis_client
from memjobs_client.contracts import NAMESPACE
from memjobs_client.errors import ConfigurationError, MemoryOff
from memjobs_worker.db import create_db_engine, migrate
from memjobs_worker.db.connect import libpq_url
from memjobs_worker.endpoints import Endpoints
from memjobs_worker.knowledge.schema import ensure_schema
from memjobs_worker.knowledge.store import KnowledgeStore
from memjobs_worker.memory.engine.base import MemoryEngine
from memjobs_worker.memory.pipeline import ExtractionScheduler, MemoryPipeline
from memjobs_worker.memory.store.sql import SqlStateStore
from memjobs_worker.observability.metrics import record_model_call
from memjobs_worker.sessions import SessionStore
from memjobs_worker.sessions.memory_docs import AuditLog, MemoryService, default_audit_path, load_provider
from memjobs_worker.settings import Settings


def producer_client(settings: Settings, *, redis_url: str | None = None,
                    broker: RedisBroker | None = None) -> MemjobsClient:
    """The producer client with the limits and switches the settings give."""
    return MemjobsClient(
        redis_url,
        broker=broker,
        max_text_bytes=settings.max_text_bytes,
        memory_enabled=settings.memory_enabled,
        consolidation_enabled=settings.consolidation_enabled,
        digest_enabled=settings.digest_enabled,
        max_transcript_bytes=settings.max_transcript_bytes,
        **redis_options(settings),
        durability=Durability(local=settings.redis_waitaof_local,
                              replicas=settings.redis_waitaof_replicas,
                              # under the socket timeout, so the wait's answer arrives
                              timeout_ms=max(1, settings.redis_timeout_ms // 2)),
    )


def redis_options(settings: Settings) -> dict[str, Any]:
    """Timeout and Sentinel options of every Redis client memjobs makes."""
    return {"timeout_s": settings.redis_timeout_ms / 1000, "sentinels": settings.redis_sentinels,
            "sentinel_master": settings.redis_sentinel_master}


def connect_redis(url: str, settings: Settings) -> redis.Redis:
    """A Redis client on ``url`` (or the sentinels' master), bounded in time."""
    return redis_client(url, **redis_options(settings))


class Runtime:
    """Lazily built collaborators of one process.

    Parameters:
        settings: read once by the entry point.
        endpoints: where Redis and the database are.
        client: the producer client to enqueue follow-up jobs with.
    """

    def __init__(self, settings: Settings, endpoints: Endpoints, client: MemjobsClient) -> None:
        self.settings = settings
        self.endpoints = endpoints
        self.client = client
        self._chats: dict[str, Any] = {}

    @cached_property
    def redis(self) -> redis.Redis:
        return connect_redis(self.endpoints.redis_url, self.settings)

    @cached_property
    def store(self) -> SqlStateStore:
        engine = create_db_engine(self.endpoints.database_url)
        migrate(engine)
        return SqlStateStore(engine)

    @cached_property
    def engine(self) -> MemoryEngine:
        if not self.settings.memory_enabled:
            raise MemoryOff("personal memory is off (NOVA_AUDIO_AGENT_MEMORY_PROVIDER=off)")
        from memjobs_worker.memory.engine.mem0_engine import Mem0Engine  # mem0 is heavy: only when used

        self.store  # noqa: B018  (migrations, pgvector check) before mem0 touches the database
        return Mem0Engine(
            database_url=libpq_url(self.endpoints.database_url),
            data_dir=self.settings.data_dir / "mem0",
            dims=self.settings.vector_dims,
            embedder=self._embedder(),
            chat=self._chat(),
            min_score=self.settings.recall_min_score,
        )

    @cached_property
    def sessions(self) -> SessionStore:
        return SessionStore(self.store.engine,
                            digest_retention_days=self.settings.digest_retention_days,
                            task_retention_days=self.settings.task_retention_days)

    @cached_property
    def audit(self) -> AuditLog:
        return AuditLog(default_audit_path(self.settings.data_dir))

    @cached_property
    def memory_docs(self) -> MemoryService:
        """The one writer of USER.md and MEMORY.md (the configured provider)."""
        s = self.settings
        provider = load_provider(s.memory_docs_provider, data_dir=s.data_dir,
                                 engine_factory=lambda: self.store.engine)
        return MemoryService(provider, max_doc_chars=s.max_document_chars,
                             max_change_chars=s.max_patch_chars, audit=self.audit)

    @cached_property
    def knowledge(self) -> KnowledgeStore:
        """The knowledge store; its tables are created (and a stale full-text index
        rebuilt) on first use, never when knowledge is off."""
        if not self.settings.knowledge_enabled:
            raise ConfigurationError("knowledge is off (MEMJOBS_KNOWLEDGE=off)")
        ensure_schema(self.store.engine)
        store = KnowledgeStore(self.store.engine)
        if store.index_is_stale():
            store.rebuild_index()
        return store

    @cached_property
    def knowledge_embedder(self) -> Any | None:
        """Embeddings for knowledge: the configured service, or None (keywords only:
        the offline embedder's lexical vectors would add nothing to full text)."""
        s = self.settings
        if s.embedding_base_url is None:
            return None
        from memjobs_worker.model_client import RemoteEmbedder

        return RemoteEmbedder(model=s.embedding_model, dims=s.embedding_dims,
                              **self._endpoint(s.embedding_base_url, s.embedding_api_key))

    def chat(self, purpose: str) -> Any | None:
        """The light model for ``purpose`` (one client per purpose, for metrics)."""
        if purpose not in self._chats:
            self._chats[purpose] = self._chat(purpose)
        return self._chats[purpose]

    @cached_property
    def scheduler(self) -> ExtractionScheduler:
        return ExtractionScheduler(self.redis, self._enqueue, lease_ms=self.settings.lease_ms,
                                   delay_ms=self.settings.extract_delay_ms)

    @cached_property
    def pipeline(self) -> MemoryPipeline:
        return MemoryPipeline(
            store=self.store,
            engine=self.engine,
            redis_client=self.redis,
            scheduler=self.scheduler,
            batch_size=self.settings.extract_batch_size,
            lease_ms=self.settings.lease_ms,
        )

    def _enqueue(self, actor: str, payload: dict[str, Any], delay_ms: int | None) -> None:
        self.client.send(actor, payload, delay_ms=delay_ms)

    def _embedder(self) -> Any:
        s = self.settings
        if s.embedding_base_url is None:
            from memjobs_worker.memory.engine.offline_embedder import HashingEmbedder

            return HashingEmbedder(s.offline_embedding_dims)
        from memjobs_worker.model_client import RemoteEmbedder

        return RemoteEmbedder(model=s.embedding_model, dims=s.embedding_dims,
                              **self._endpoint(s.embedding_base_url, s.embedding_api_key))

    def _chat(self, purpose: str = "extract") -> Any | None:
        """The light model, or None when none is configured."""
        s = self.settings
        if not s.model_configured:
            return None
        from memjobs_worker.model_client import ChatModel

        return ChatModel(model=s.memory_model, purpose=purpose,
                         **self._endpoint(s.memory_base_url, s.memory_api_key))

    def _endpoint(self, base_url: str, api_key: SecretStr | None) -> dict[str, Any]:
        s = self.settings
        return {
            "base_url": base_url,
            "api_key": api_key.get_secret_value() if api_key else None,
            "timeout_ms": s.model_timeout_ms,
            "max_attempts": s.model_max_attempts,
            "on_call": record_model_call,
        }

    def close(self) -> None:
        if "memory_docs" in self.__dict__:
            self.memory_docs.provider.close()
        for name in ("engine", "store"):
            if name in self.__dict__:
                self.__dict__[name].close()
        if "redis" in self.__dict__:
            self.redis.close()


def heartbeat_key() -> str:
    """The zset where Dramatiq's Redis broker records its workers' heartbeats."""
    return f"{NAMESPACE}:__heartbeats__"
