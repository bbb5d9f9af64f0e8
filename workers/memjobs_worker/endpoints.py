"""Where Redis and the state database are (configured URLs, or the embedded
stack), the switches a running stack shares with the commands run against it
(:func:`stack_settings`), and the clients that connect to them without the rest
of the worker: the producer client (``memjobs remember`` needs nothing more)
and Redis clients bounded in time."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from memjobs_client.client import MemjobsClient
from memjobs_client.connect import Durability, MemoryGuard, redis_client
from memjobs_client.errors import ConfigurationError
from memjobs_worker.embedded.stack import read_stack
from memjobs_worker.settings import (
    DatabaseSettings,
    KnowledgeSettings,
    MemorySettings,
    RedisSettings,
    SessionSettings,
    Settings,
)

#: The switches a running stack shares with the commands run against its data
#: directory: a command follows the stack's value, not its shell's.
SHARED_SETTINGS = (
    "knowledge.mode",
    "memory.provider",
    "sessions.memory_auto",
    "sessions.session_digest",
    "model.base_url",
    "model.name",
    "embedding.base_url",
    "embedding.model",
    "embedding.dims",
    "embedding.local_embedder",
    "knowledge.roots",
    "api.host",
    "metrics.mode",
)
#: Secrets: the state file says only whether the stack has one.
SHARED_SECRETS = (
    "api.gateway_token",
    "api.host_token",
    "api.token_key",
    "model.api_key",
    "model.dashscope_api_key",
    "embedding.api_key",
)


def stack_settings(settings: Settings) -> dict[str, dict[str, Any]]:
    """What ``memjobs up`` records of its settings in the state file: each shared
    switch's value and where it came from (``environment`` or ``default``), and
    for each secret only whether it is set."""
    entries = {entry.key: entry for entry in settings.entries()}
    shared: dict[str, dict[str, Any]] = {}
    for key in (*SHARED_SETTINGS, *SHARED_SECRETS):
        entry = entries[key]
        shown: dict[str, Any] = {"set": entry.value is not None} if entry.secret else {"value": entry.value}
        shared[key] = {**shown, "from": "environment" if entry.from_env else "default"}
    return shared


if TYPE_CHECKING:
    from dramatiq.brokers.redis import RedisBroker


@dataclass(frozen=True)
class Endpoints:
    redis_url: str
    database_url: str


def resolve_endpoints(data_dir: Path, redis_settings: RedisSettings, database: DatabaseSettings) -> Endpoints:
    """The configured URLs; for what is unset, the running embedded stack's (in ``data_dir``).

    Raises:
        ConfigurationError: something is unset and no ``memjobs up`` is running.
    """
    if redis_settings.url and database.url:
        return Endpoints(redis_settings.url, database.url)
    stack = read_stack(data_dir)
    if stack is None:
        names = [
            name
            for name, value in (
                ("MEMJOBS_REDIS_URL", redis_settings.url),
                ("MEMJOBS_DATABASE_URL", database.url),
            )
            if not value
        ]
        missing = " and ".join(names) + (" are unset" if len(names) > 1 else " is unset")
        raise ConfigurationError(
            f"no memjobs stack is running in {data_dir} and {missing}: "
            "start the embedded stack with `memjobs up` (in another terminal), "
            "or set the URL(s) of your Redis and PostgreSQL"
        )
    return Endpoints(redis_settings.url or stack.redis_url, database.url or stack.database_url)


def producer_client(
    redis_settings: RedisSettings,
    memory: MemorySettings,
    sessions: SessionSettings,
    knowledge: KnowledgeSettings,
    *,
    redis_url: str | None = None,
    broker: RedisBroker | None = None,
) -> MemjobsClient:
    """The producer client with the limits and switches the settings give.

    Session end queues consolidation and the digest whatever these settings say:
    the workers decide with their own (a door's process may have no model key)."""
    return MemjobsClient(
        redis_url,
        broker=broker,
        max_text_bytes=memory.max_text_bytes,
        memory_enabled=memory.enabled,
        max_transcript_bytes=sessions.max_transcript_bytes,
        knowledge_enabled=knowledge.enabled,
        **redis_options(redis_settings),
        # A worker's own follow-up jobs (its broker) are not held back: they drain.
        memory_guard=MemoryGuard(redis_settings.high_water) if broker is None else None,
        durability=Durability(
            local=redis_settings.waitaof_local,
            replicas=redis_settings.waitaof_replicas,
            # under the socket timeout, so the wait's answer arrives
            timeout_ms=max(1, redis_settings.timeout_ms // 2),
        ),
    )


def redis_options(redis_settings: RedisSettings) -> dict[str, Any]:
    """Timeout and Sentinel options of every Redis client memjobs makes."""
    return {
        "timeout_s": redis_settings.timeout_ms / 1000,
        "sentinels": redis_settings.sentinels,
        "sentinel_master": redis_settings.sentinel_master,
    }


def connect_redis(url: str, redis_settings: RedisSettings) -> redis.Redis:
    """A Redis client on ``url`` (or the sentinels' master), bounded in time."""
    return redis_client(url, **redis_options(redis_settings))
