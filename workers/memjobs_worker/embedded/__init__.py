"""The embedded stack: Redis and PostgreSQL with pgvector started by memjobs
itself in its data directory, and the state file other commands find them by.

The servers' classes are imported on first use (PEP 562): the commands that
only read the state file (every producer command) do not load psycopg.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from memjobs_worker.embedded.stack import StackInfo, read_stack, remove_stack, write_stack

if TYPE_CHECKING:
    from memjobs_worker.embedded.postgres import EmbeddedPostgres
    from memjobs_worker.embedded.redis import EmbeddedRedis

__all__ = [
    "EmbeddedPostgres",
    "EmbeddedRedis",
    "StackInfo",
    "read_stack",
    "remove_stack",
    "write_stack",
]

_SERVERS = {"EmbeddedPostgres": "memjobs_worker.embedded.postgres", "EmbeddedRedis": "memjobs_worker.embedded.redis"}


def __getattr__(name: str) -> Any:
    if name not in _SERVERS:
        raise AttributeError(f"module 'memjobs_worker.embedded' has no attribute {name!r}")
    value = getattr(import_module(_SERVERS[name]), name)
    globals()[name] = value
    return value
