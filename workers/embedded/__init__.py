"""The embedded stack: Redis and PostgreSQL with pgvector started by memjobs
itself in its data directory, and the state file other commands find them by."""

from workers.embedded.postgres import EmbeddedPostgres
from workers.embedded.redis import EmbeddedRedis
from workers.embedded.stack import StackInfo, read_stack, remove_stack, write_stack

__all__ = [
    "EmbeddedPostgres",
    "EmbeddedRedis",
    "StackInfo",
    "read_stack",
    "remove_stack",
    "write_stack",
]
