"""The ledger seam, its PostgreSQL implementation and its in-memory twin."""

from memjobs_worker.memory.store.base import (
    Attempt,
    CommitResult,
    ForgetResult,
    PendingWindow,
    Produced,
    SourceRecord,
    StateStore,
)
from memjobs_worker.memory.store.sql import SqlStateStore
from memjobs_worker.memory.store.stub import InMemoryStateStore

__all__ = [
    # the seam
    "Attempt",
    "CommitResult",
    "ForgetResult",
    "PendingWindow",
    "Produced",
    "SourceRecord",
    "StateStore",
    # implementations
    "InMemoryStateStore",
    "SqlStateStore",
]
