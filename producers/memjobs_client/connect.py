"""Redis connections for producers and workers: bounded in time, optionally
through Redis Sentinel, and optionally waiting for durability.

- Every call is bounded: connect and read timeouts of ``timeout_s`` and one
  quick retry, so a call during an outage fails (``BackendUnavailable`` at the
  callers) in about twice ``timeout_s``, never hangs.
- With sentinels, the master is looked up by name through them, and found
  again after a failover (redis-py's ``SentinelConnectionPool``).
- :class:`MemoryGuard` refuses new jobs (``RedisFull``) while Redis is near its
  ``maxmemory``, so that the workers keep the rest to drain the queues.
- :class:`Durability` makes a write wait until it is fsynced and/or held by
  replicas (``WAITAOF`` on Redis ≥ 7.2, else ``WAIT`` for replicas), so that an
  acknowledged job survives the loss of the master.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from memjobs_client import keys
from memjobs_client.errors import BackendUnavailable, RedisFull
from memjobs_client.redis_seam import redis_errors

log = logging.getLogger(__name__)

SentinelAddresses = Sequence[tuple[str, int]]


def parse_sentinels(value: str | SentinelAddresses | None) -> list[tuple[str, int]]:
    """``"h1:26379,h2:26379"`` (or pairs) → ``[("h1", 26379), ("h2", 26379)]``."""
    if value is None:
        return []
    if not isinstance(value, str):
        return [(str(h), int(p)) for h, p in value]
    out: list[tuple[str, int]] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"sentinel address {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    return out


def redis_client(
    url: str,
    *,
    timeout_s: float = 5.0,
    sentinels: str | SentinelAddresses | None = None,
    sentinel_master: str = "memjobs",
) -> redis.Redis:
    """A redis-py client on ``url``, or on the master the sentinels name.

    With sentinels the URL still gives the database number, user and password.
    """
    common: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 1),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
        "health_check_interval": 30,
    }
    addresses = parse_sentinels(sentinels)
    if not addresses:
        return redis.Redis.from_url(url, **common)
    params = redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    auth = {k: params[k] for k in ("db", "username", "password") if params.get(k) is not None}
    sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        addresses,
        socket_timeout=timeout_s,
        # Each sentinel asked once per lookup: redis-py's default (three retries,
        # backing off up to 10 s) made one call from a host cut off from Redis
        # take 25 s instead of the few timeouts the lookup is worth.
        sentinel_kwargs={
            "socket_timeout": timeout_s,
            "socket_connect_timeout": timeout_s,
            "retry": Retry(NoBackoff(), 0),
        },
    )
    master: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call, unused-ignore]
        sentinel_master, **common, **auth
    )
    return master


class MemoryGuard:
    """Refuse new jobs while Redis's memory is at ``high_water`` of its ``maxmemory``.

    With ``maxmemory`` and ``noeviction``, Redis refuses every write once full,
    the workers' own too: they could then neither take a lock nor queue the
    follow-up of a job, and a full Redis would stay full. Producers stop
    earlier, at ``high_water`` (0.9: the last tenth is the workers'), and the
    workers drain the queues; the same call succeeds again once they have.
    Redis's memory is read (``INFO memory``) at most once per ``refresh_s``.
    ``high_water`` 1 (or no ``maxmemory``) leaves the refusing to Redis alone.
    """

    def __init__(self, high_water: float = 0.9, refresh_s: float = 1.0) -> None:
        if not 0 < high_water <= 1:
            raise ValueError(f"high_water must be in (0, 1], not {high_water!r}")
        self.high_water = high_water
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._next_read = 0.0
        self._used = self._limit = 0

    def check(self, client: redis.Redis) -> None:
        """Raises RedisFull when Redis is over the high-water mark (a RedisError
        when Redis does not answer)."""
        if self.high_water >= 1:
            return
        now = time.monotonic()
        if now >= self._next_read:
            info = client.info("memory")
            with self._lock:
                self._used, self._limit = int(info["used_memory"]), int(info.get("maxmemory", 0))
                self._next_read = now + self.refresh_s
        used, limit = self._used, self._limit
        if limit and used >= limit * self.high_water:
            raise RedisFull(
                f"Redis is full ({used / 2**20:.1f} of {limit / 2**20:.1f} MiB used, new jobs stop at "
                f"{self.high_water:.0%}): nothing was queued; retry once the workers have drained it"
            )


class Durability:
    """Wait after a write until it is durable: fsynced locally and/or on replicas.

    Waiting for a *later* write of this connection covers every earlier write of
    any connection (the append-only file and the replication stream are one
    ordered log), so a marker write and the wait run on one connection.

    Parameters:
        local: 1 to wait for the local fsync (WAITAOF; Redis ≥ 7.2).
        replicas: replicas that must hold (WAITAOF: have fsynced) the write.
        timeout_ms: how long to wait; fewer acknowledgements → BackendUnavailable.
    """

    def __init__(self, *, local: int = 0, replicas: int = 0, timeout_ms: int = 5000) -> None:
        self.local = local
        self.replicas = replicas
        self.timeout_ms = timeout_ms
        self._waitaof: bool | None = None  # unknown until the server answers

    @property
    def enabled(self) -> bool:
        return bool(self.local or self.replicas)

    def wait(self, client: redis.Redis) -> None:
        """Raises BackendUnavailable when the write is not durable in time."""
        if not self.enabled:
            return
        with redis_errors("Redis did not confirm durability"):
            self._wait(client)

    def _wait(self, client: redis.Redis) -> None:
        marker = keys.DURABILITY_PROBE
        if self._waitaof is not False:
            pipe = client.pipeline(transaction=False)
            pipe.set(marker, "1")
            pipe.execute_command(  # type: ignore[no-untyped-call]
                "WAITAOF", self.local, self.replicas, self.timeout_ms
            )
            try:
                _, acks = pipe.execute()
            except redis.ResponseError as exc:
                if "unknown command" not in str(exc).lower():
                    raise
                log.warning(
                    "WAITAOF is not supported by this Redis (< 7.2): relying on appendfsync and WAIT for replicas"
                )
                self._waitaof = False
            else:
                self._waitaof = True
                local, replicas = int(acks[0]), int(acks[1])
                if local < self.local or replicas < self.replicas:
                    raise BackendUnavailable(
                        f"write not durable in {self.timeout_ms} ms: fsynced locally {local}, "
                        f"on {replicas} of {self.replicas} replica(s)"
                    )
                return
        if self.replicas:
            pipe = client.pipeline(transaction=False)
            pipe.set(marker, "1")
            pipe.execute_command("WAIT", self.replicas, self.timeout_ms)  # type: ignore[no-untyped-call]
            _, acked = pipe.execute()
            if int(acked) < self.replicas:
                raise BackendUnavailable(
                    f"write held by {int(acked)} of {self.replicas} replica(s) after {self.timeout_ms} ms"
                )
