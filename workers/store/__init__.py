"""The ledger seam and its PostgreSQL implementation."""

from workers.store.base import (
    Attempt,
    CommitResult,
    ForgetResult,
    Produced,
    SourceRecord,
    StateStore,
)
from workers.store.sql import SqlStateStore

__all__ = [
    "Attempt",
    "CommitResult",
    "ForgetResult",
    "Produced",
    "SourceRecord",
    "SqlStateStore",
    "StateStore",
]
