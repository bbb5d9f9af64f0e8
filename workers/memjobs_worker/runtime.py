"""A process's wiring: the shared connections, and each feature's parts built
on first use by the feature's own ``build`` module.

Built once per process at its entry point (a worker process, a CLI command,
the HTTP API) from settings read there; the entry point hands each part the
parts it uses, or the runtime as one feature's parts (a protocol naming only
those: :class:`~memjobs_worker.knowledge.build.KnowledgeParts`,
:class:`~memjobs_worker.sessions.build.SessionParts`). :func:`open_door`
wires the runtime of a door (CLI, HTTP): its producer client decides forgets
on the runtime's ledger, so every door answers alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from functools import cached_property
from typing import TYPE_CHECKING, Any

import redis

from memjobs_client.client import MemjobsClient
from memjobs_worker.db import create_db_engine
from memjobs_worker.db import migrate as migrate_db
from memjobs_worker.endpoints import Endpoints
from memjobs_worker.endpoints import connect_redis as connect_redis  # moved there: light for producers
from memjobs_worker.endpoints import producer_client as producer_client
from memjobs_worker.endpoints import redis_options as redis_options
from memjobs_worker.memory import queued
from memjobs_worker.memory.build import build_engine, build_pipeline, build_scheduler, open_ledger
from memjobs_worker.memory.service import PersonalMemory
from memjobs_worker.model_breaker import ModelBreaker, breakers
from memjobs_worker.settings import Settings

if TYPE_CHECKING:
    from dramatiq.middleware import Middleware
    from sqlalchemy.engine import Engine

    from memjobs_worker.embedding.fair import ModelShare
    from memjobs_worker.knowledge.store import KnowledgeStore
    from memjobs_worker.memory.engine.base import MemoryEngine
    from memjobs_worker.memory.intake import ExtractionScheduler
    from memjobs_worker.memory.pipeline import MemoryPipeline
    from memjobs_worker.memory.store.base import StateStore
    from memjobs_worker.model_client import ChatModel, RemoteEmbedder
    from memjobs_worker.sessions.blackboard import BlackboardStore
    from memjobs_worker.sessions.memory_docs import AuditTrail, MemoryService
    from memjobs_worker.sessions.store import SessionStore
    from memjobs_worker.sweeper import Sweeper

# The model clients, sessions, knowledge and the sweeper are imported by the
# part that builds them, when it is first used: a door that only forgets (the
# CLI's `forget`) does not load the model client (openai) or the session jobs.


def open_door(
    settings: Settings,
    endpoints: Endpoints,
    *,
    redis_url: str | None = None,
    on_engine_built: Callable[[], None] | None = None,
    middleware: Sequence[Middleware] = (),
) -> Runtime:
    """The runtime of a door (the CLI, the HTTP API), its producer client built
    on ``redis_url`` (default: the endpoints') with ``middleware`` on its broker
    (the HTTP API counts what it enqueues); its forgets are decided by
    ``runtime.personal_memory``. Close both: ``runtime.close()``, then
    ``runtime.client.close()``."""
    client = producer_client(
        settings.redis,
        settings.memory,
        settings.sessions,
        settings.knowledge,
        redis_url=redis_url or endpoints.redis_url,
    )
    for each in middleware:
        client.broker.add_middleware(each)
    return Runtime(settings, endpoints, client, on_engine_built=on_engine_built)


class Runtime:
    """Lazily built collaborators of one process.

    Parameters:
        settings: read once by the entry point.
        endpoints: where Redis and the database are.
        client: the producer client to enqueue follow-up jobs with.
        on_engine_built: called once mem0 is built (the HTTP API moves its
            long-lived objects out of the collector's sight then).

    Each part that holds a resource registers its closing when it is built, so
    :meth:`close` closes what was built, in the reverse order, and nothing else.
    """

    def __init__(
        self,
        settings: Settings,
        endpoints: Endpoints,
        client: MemjobsClient,
        *,
        on_engine_built: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.endpoints = endpoints
        self.client = client
        self._on_engine_built = on_engine_built
        self._chats: dict[str, ChatModel | None] = {}
        self._closing = ExitStack()
        self._migrated = False
        self._migrating = threading.Lock()
        #: Called before each extraction batch: in a process whose pools share
        #: it, the wait for the cheap pool's work (SharedWorker.cheap_first).
        self.before_batch: Callable[[], None] = lambda: None

    # shared -----------------------------------------------------------------

    @cached_property
    def redis(self) -> redis.Redis:
        client = connect_redis(self.endpoints.redis_url, self.settings.redis)
        self._closing.callback(client.close)
        return client

    @cached_property
    def _state_db(self) -> Engine:
        # A connection for every worker thread of the process (and a few for the
        # sweeper and heartbeats): an overflow connection is closed on return,
        # so a pool smaller than the threads reconnects on every job.
        s = self.settings
        engine = create_db_engine(
            self.endpoints.database_url,
            pool_size=max(s.workers.worker_threads, s.workers.fast_worker_threads, 8) + 2,
            idle_close_s=s.database.idle_close_s,
        )
        self._closing.callback(engine.dispose)
        return engine

    def migrate(self) -> None:
        """Bring the state database to head (pgvector checked), once per runtime:
        the worker's step at boot, and a door's on its first database call
        (:attr:`db`). Again, it does nothing.

        Raises:
            ConfigurationError: the server has no pgvector extension.
        """
        if self._migrated:
            return
        with self._migrating:
            if not self._migrated:
                migrate_db(self._state_db)
                self._migrated = True

    @property
    def db(self) -> Engine:
        """The state database, migrated (:meth:`migrate`) before it is first handed out."""
        self.migrate()
        return self._state_db

    @cached_property
    def model_share(self) -> ModelShare:
        """This process's model slots: every embedder it builds takes turns on them."""
        from memjobs_worker.embedding import model_share

        return model_share(self.settings.embedding, self.settings.api)

    @cached_property
    def model_breakers(self) -> dict[str, ModelBreaker]:
        """The circuit breaker of each model service, in Redis: shared by every host."""
        return breakers(self.settings.model, self.redis)

    def model_waiting(self) -> bool:
        """Whether a call to a configured model service would now be refused by its
        breaker (:meth:`~memjobs_worker.model_breaker.ModelBreaker.waiting`)."""
        used = [
            name
            for name, on in (("chat", self.settings.model_configured), ("embed", self.settings.embedding.configured))
            if on
        ]
        return any(self.model_breakers[name].waiting() for name in used)

    def chat(self, purpose: str) -> ChatModel | None:
        """The light model for ``purpose`` (one client per purpose, for metrics)."""
        if purpose not in self._chats:
            from memjobs_worker.model_client import chat_model

            self._chats[purpose] = chat_model(
                self.settings.model, self.settings.embedding, purpose, self.model_breakers["chat"]
            )
        return self._chats[purpose]

    # personal memory ----------------------------------------------------------

    @cached_property
    def store(self) -> StateStore:
        return open_ledger(self.db)

    @cached_property
    def engine(self) -> MemoryEngine:
        self.migrate()  # (pgvector checked) before mem0 touches the database
        s = self.settings
        engine = build_engine(
            s.memory,
            s.model,
            s.embedding,
            database_url=self.endpoints.database_url,
            data_dir=s.data_dir,
            breakers=self.model_breakers,
            share=self.model_share,
            idle_close_s=s.database.idle_close_s,
        )
        self._closing.callback(engine.close)
        if self._on_engine_built is not None:
            self._on_engine_built()
        return engine

    @cached_property
    def scheduler(self) -> ExtractionScheduler:
        return build_scheduler(self.settings.memory, self.redis, self._enqueue)

    @cached_property
    def pipeline(self) -> MemoryPipeline:
        return build_pipeline(
            self.settings.memory,
            store=self.store,
            engine=self.engine,
            redis_client=self.redis,
            scheduler=self.scheduler,
            before_batch=lambda: self.before_batch(),  # (set once the process's pools are known)
        )

    @cached_property
    def personal_memory(self) -> PersonalMemory:
        """Forget, recall and the owner's reads as every door asks for them
        (its parts still built on first use)."""
        return PersonalMemory(
            enabled=self.settings.memory.enabled,
            store=lambda: self.store,
            scheduler=lambda: self.scheduler,
            pipeline=lambda: self.pipeline,
            remember_queued=lambda key, sid: queued.holds(self.redis, key, sid),
            enqueue=lambda actor, payload: self.client.send(actor, payload),
            rules=self.settings.source_rules(),
        )

    @cached_property
    def sweeper(self) -> Sweeper:
        from memjobs_worker.sweeper import Sweeper

        return Sweeper(
            self.store,
            self.scheduler,
            self.sessions,
            self.settings.lifecycle.sweep_pending_after_ms,
            audit=self.audit,
            blackboard=self.blackboard,
        )

    # sessions -----------------------------------------------------------------

    @cached_property
    def sessions(self) -> SessionStore:
        from memjobs_worker.sessions.build import build_session_store

        return build_session_store(self.settings.lifecycle, self.db)

    @cached_property
    def audit(self) -> AuditTrail:
        """The memory audit trail (the state database's ``memory_audit``)."""
        from memjobs_worker.sessions.build import build_audit

        return build_audit(self.settings.lifecycle, self.db)

    @cached_property
    def blackboard(self) -> BlackboardStore:
        """The sessions' L0 blackboards (the state database's ``blackboard_entries``)."""
        from memjobs_worker.sessions.build import build_blackboard

        return build_blackboard(self.settings.blackboard, self.db)

    @cached_property
    def memory_docs(self) -> MemoryService:
        """The one writer of USER.md and MEMORY.md (the configured provider)."""
        from memjobs_worker.sessions.build import build_memory_service

        service = build_memory_service(self.settings.sessions, self.settings.data_dir, lambda: self.db, self.audit)
        self._closing.callback(service.close)
        return service

    # knowledge ----------------------------------------------------------------

    @cached_property
    def knowledge(self) -> KnowledgeStore:
        from memjobs_worker.knowledge.build import open_knowledge

        return open_knowledge(self.settings.knowledge, self.db)

    @cached_property
    def knowledge_embedder(self) -> RemoteEmbedder | None:
        """Embeddings for knowledge: the configured service or the local model, or
        None with the hashed embedder (keywords only: see
        :func:`memjobs_worker.embedding.semantic`). Refused while chunks embedded
        by another model, or chunks without a vector, remain (``memjobs reembed``)."""
        from memjobs_worker.embedding import build_embedder, model_id, semantic

        if not semantic(self.settings.embedding):
            return None
        from memjobs_worker.knowledge.vectors import check_knowledge_vectors

        knowledge = self.knowledge  # the switch, and the knowledge tables, first
        check_knowledge_vectors(
            knowledge.engine, model_id(self.settings.embedding), self.settings.embedding.vector_dims
        )
        embedder: RemoteEmbedder = build_embedder(
            self.settings.model, self.settings.embedding, self.model_share, self.model_breakers["embed"]
        )
        return embedder

    def _enqueue(self, actor: str, payload: dict[str, Any], delay_ms: int | None) -> None:
        self.client.send(actor, payload, delay_ms=delay_ms)

    def close(self) -> None:
        """Close the parts built so far (none is built to be closed); again, nothing."""
        self._closing.close()
