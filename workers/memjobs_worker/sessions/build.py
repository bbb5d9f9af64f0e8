"""Session end's parts, built from settings: the session store, the memory
service (the one writer of USER.md and MEMORY.md) and its audit trail, the
sessions' blackboards; and :class:`SessionParts`, what session end's jobs are
handed (:class:`SessionStores`, the stores alone, are what the API reads too)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sqlalchemy.engine import Engine

from memjobs_worker.sessions.blackboard import BlackboardStore, Limits
from memjobs_worker.sessions.memory_docs import AuditTrail, MemoryService, load_provider
from memjobs_worker.sessions.store import SessionStore
from memjobs_worker.settings import BlackboardSettings, LifecycleSettings, SessionSettings

if TYPE_CHECKING:
    from memjobs_worker.model_client import ChatModel


class SessionStores(Protocol):
    """Session end's stores in one process, each built when first read (the
    process's :class:`~memjobs_worker.runtime.Runtime` is one)."""

    @property
    def sessions(self) -> SessionStore: ...

    @property
    def memory_docs(self) -> MemoryService: ...

    @property
    def audit(self) -> AuditTrail: ...

    @property
    def blackboard(self) -> BlackboardStore: ...


class SessionParts(SessionStores, Protocol):
    """What session end's jobs are handed (the feature sees these alone): its
    stores and the light model."""

    def chat(self, purpose: str) -> ChatModel | None:
        """The light model for ``purpose``, or None when none is configured."""
        ...


def build_session_store(lifecycle: LifecycleSettings, db: Engine) -> SessionStore:
    return SessionStore(
        db,
        digest_retention_days=lifecycle.digest_retention_days,
        task_retention_days=lifecycle.task_retention_days,
    )


def build_audit(lifecycle: LifecycleSettings, db: Engine) -> AuditTrail:
    """The memory audit trail in the state database (one for every host)."""
    return AuditTrail(db, retention_days=lifecycle.memory_audit_retention_days)


def build_memory_service(
    sessions: SessionSettings, data_dir: Path, db: Callable[[], Engine], audit: AuditTrail
) -> MemoryService:
    """The configured provider behind the memory service (files under ``data_dir``
    for the markdown one); ``db`` is called only by providers that store in the state database."""
    provider = load_provider(sessions.memory_docs_provider, data_dir=data_dir, engine_factory=db)
    return MemoryService(
        provider,
        max_doc_chars=sessions.max_document_chars,
        max_change_chars=sessions.max_patch_chars,
        audit=audit,
    )


def build_blackboard(blackboard: BlackboardSettings, db: Engine) -> BlackboardStore:
    """The sessions' L0 blackboards in the state database, within the settings' limits."""
    return BlackboardStore(
        db,
        limits=Limits(
            retention_days=blackboard.retention_days,
            max_entries=blackboard.max_entries,
            max_bytes=blackboard.max_bytes,
        ),
    )
