"""The parts of an owner's data in this stack: the one list erase, export and
import walk. One more store is one more entry here."""

from __future__ import annotations

from memjobs_worker.lifecycle.blackboard import BlackboardPart
from memjobs_worker.lifecycle.knowledge import KnowledgePart
from memjobs_worker.lifecycle.ledger import LedgerPart, MemoriesPart
from memjobs_worker.lifecycle.parts import OwnerPart
from memjobs_worker.lifecycle.queues import QueuedJobsPart, RedisKeysPart
from memjobs_worker.lifecycle.sessions import AuditPart, MemoryDocumentsPart, SessionsPart
from memjobs_worker.runtime import Runtime


def owner_parts(runtime: Runtime, *, wait_ms: int | None = None) -> list[OwnerPart]:
    """Every store of an owner's data, in order: the owner's jobs first (so that
    none runs while the stores are erased), the ledger before the memories that
    name its sources (an import restores them in this order), Redis's keys last.
    Each part builds what it uses on first use: an erasure builds neither mem0
    nor an embedder. ``wait_ms``: how long an erasure waits for the owner's running
    jobs (default ``MEMJOBS_ERASE_WAIT_MS``)."""
    s = runtime.settings
    return [
        QueuedJobsPart(runtime, wait_ms=s.lifecycle.erase_wait_ms if wait_ms is None else wait_ms),
        LedgerPart(runtime),
        MemoriesPart(runtime, enabled=s.memory.enabled),
        MemoryDocumentsPart(runtime),
        SessionsPart(runtime),
        BlackboardPart(runtime),
        KnowledgePart(runtime, enabled=s.knowledge.enabled),
        AuditPart(runtime),
        RedisKeysPart(runtime),
    ]
