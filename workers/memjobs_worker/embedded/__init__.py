"""The embedded stack: Redis and PostgreSQL with pgvector started by memjobs
itself in its data directory, and the state file other commands find them by."""

from memjobs_worker.embedded.postgres import EmbeddedPostgres
from memjobs_worker.embedded.redis import EmbeddedRedis
from memjobs_worker.embedded.stack import StackInfo, read_stack, remove_stack, write_stack

__all__ = [
    "EmbeddedPostgres",
    "EmbeddedRedis",
    "StackInfo",
    "read_stack",
    "remove_stack",
    "write_stack",
]
