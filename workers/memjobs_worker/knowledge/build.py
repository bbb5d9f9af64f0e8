"""Knowledge's parts, built from settings: the store (its tables created and a
stale full-text index rebuilt on first use, never when knowledge is off), and
:class:`KnowledgeParts`, what knowledge's jobs are handed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import redis
from sqlalchemy.engine import Engine

from memjobs_client.errors import KnowledgeOff
from memjobs_worker.knowledge.schema import ensure_schema
from memjobs_worker.knowledge.store import KnowledgeStore
from memjobs_worker.settings import KnowledgeSettings

if TYPE_CHECKING:
    from memjobs_worker.model_client import RemoteEmbedder


class KnowledgeParts(Protocol):
    """Knowledge's parts in one process, each built when first read (the process's
    :class:`~memjobs_worker.runtime.Runtime` is one: the feature sees these alone)."""

    @property
    def redis(self) -> redis.Redis: ...

    @property
    def knowledge(self) -> KnowledgeStore:
        """The store (:func:`open_knowledge`)."""
        ...

    @property
    def knowledge_embedder(self) -> RemoteEmbedder | None:
        """The knowledge embedder, or None with the hashed embedder (keywords only)."""
        ...


def open_knowledge(knowledge: KnowledgeSettings, db: Engine) -> KnowledgeStore:
    """The knowledge store, ready to use.

    Raises:
        KnowledgeOff: knowledge is off (``MEMJOBS_KNOWLEDGE=off``).
    """
    if not knowledge.enabled:
        raise KnowledgeOff()
    ensure_schema(db)
    store = KnowledgeStore(db)
    if store.index_is_stale():
        store.rebuild_index()
    return store
