"""The embedded stack: Redis and PostgreSQL with pgvector started by memjobs
itself in its data directory, and the state file other commands find them by.

The servers' classes are imported on first use (PEP 562): the commands that
only read the state file (every producer command) do not load psycopg.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memjobs_worker.embedded.stack import StackInfo, read_stack, remove_stack, write_stack
from memjobs_worker.lazy import lazy_exports

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


__getattr__ = lazy_exports(__name__, _SERVERS, globals())
