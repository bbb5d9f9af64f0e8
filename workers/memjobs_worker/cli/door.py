"""What a command opens to reach the stack: the producer client alone (the
producer commands), or a door's whole runtime (readers and operators).

Light to import: the runtime, with the worker behind it (the ledger, mem0's
wiring, the model clients), is imported only by :func:`runtime_for`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from memjobs_client.client import MemjobsClient
from memjobs_client.payloads import owner_key_of
from memjobs_worker.endpoints import producer_client, resolve_endpoints
from memjobs_worker.settings import Settings

if TYPE_CHECKING:
    from memjobs_worker.runtime import Runtime


def owner_arg(value: str) -> str:
    """``--owner`` as the owner's key.

    Raises:
        InvalidPayload: the owner is empty.
    """
    return owner_key_of(value, "--owner must not be empty")


@contextmanager
def producer_for(settings: Settings) -> Iterator[MemjobsClient]:
    """The producer client on the configured (or running embedded) Redis."""
    client = producer_client(
        settings.redis,
        settings.memory,
        settings.sessions,
        settings.knowledge,
        redis_url=resolve_endpoints(settings.data_dir, settings.redis, settings.database).redis_url,
    )
    try:
        yield client
    finally:
        client.close()


@contextmanager
def runtime_for(settings: Settings) -> Iterator[Runtime]:
    """A door's runtime on the configured (or running embedded) Redis and database:
    its personal memory decides forgets at once, as the HTTP API's does."""
    from memjobs_worker.runtime import open_door  # the whole worker: only the commands that read it

    runtime = open_door(settings, resolve_endpoints(settings.data_dir, settings.redis, settings.database))
    try:
        yield runtime
    finally:
        runtime.close()
        runtime.client.close()
