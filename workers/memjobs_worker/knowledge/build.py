"""Knowledge's parts, built from settings: the store (its tables created and a
stale full-text index rebuilt on first use, never when knowledge is off)."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from memjobs_client.errors import KnowledgeOff
from memjobs_worker.knowledge.schema import ensure_schema
from memjobs_worker.knowledge.store import KnowledgeStore
from memjobs_worker.settings import Settings


def open_knowledge(settings: Settings, db: Engine) -> KnowledgeStore:
    """The knowledge store, ready to use.

    Raises:
        KnowledgeOff: knowledge is off (``MEMJOBS_KNOWLEDGE=off``).
    """
    if not settings.knowledge_enabled:
        raise KnowledgeOff()
    ensure_schema(db)
    store = KnowledgeStore(db)
    if store.index_is_stale():
        store.rebuild_index()
    return store
