"""The ledger seam and its PostgreSQL implementation."""

from memjobs_worker.memory.store.base import (
    Attempt,
    CommitResult,
    ForgetResult,
    Produced,
    SourceRecord,
    StateStore,
)
from memjobs_worker.memory.store.sql import SqlStateStore

__all__ = [
    "Attempt",
    "CommitResult",
    "ForgetResult",
    "Produced",
    "SourceRecord",
    "SqlStateStore",
    "StateStore",
]
