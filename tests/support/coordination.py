"""The lease and the extraction scheduler on one backend, with the backend's time
in the test's hands: :class:`Twin` (the in-memory twins on a manual clock, no
server) and :class:`OnRedis` (the Redis ones on the test session's Redis).

A contract test runs the same assertions on both (a ``co`` fixture per
backend), so a twin cannot drift from the real thing. Time is moved, never
slept through: :meth:`Coordination.advance` moves the holders' monotonic clock
and, on Redis, shortens every key's time to live by as much, which is what
that much time passing would have done.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from types import TracebackType

import pytest
import redis

from memjobs_client import keys
from memjobs_client.contracts import owner_key
from memjobs_worker.embedded.process import free_port
from memjobs_worker.lease import InMemoryKeys, Lease, LeaseLock, LockEvent
from memjobs_worker.lease.base import no_event
from memjobs_worker.memory.intake import (
    Enqueue,
    ExtractionScheduler,
    InMemoryExtractionScheduler,
    RedisExtractionScheduler,
)
from tests.support.clocks import ManualClock

#: The owner the coordination tests lock and schedule.
KEY = owner_key("coordinated@example.com")


class Coordination(ABC):
    """Leases and schedulers sharing one backend, and that backend's time."""

    def __init__(self) -> None:
        self.clock = ManualClock()

    @abstractmethod
    def leases(self, name: str, owner_key: str, *, lease_ms: int, on_event: LockEvent = no_event) -> Lease:
        """A :class:`~memjobs_worker.lease.LeaseFactory` on this backend."""

    @abstractmethod
    def scheduler(self, enqueue: Enqueue, *, lease_ms: int, delay_ms: int) -> ExtractionScheduler:
        """A scheduler on this backend, on :attr:`clock`."""

    @abstractmethod
    def _pass_time(self, ms: int) -> None:
        """What ``ms`` milliseconds do to the backend's keys."""

    @abstractmethod
    def cut_off(self) -> None:
        """From now on the backend does not answer (a partition)."""

    @abstractmethod
    def reconnect(self) -> None:
        """The partition heals."""

    def lease(self, *, lease_ms: int, events: list[str] | None = None, name: str = "learn", owner: str = KEY) -> Lease:
        return self.leases(name, owner, lease_ms=lease_ms, on_event=events.append if events is not None else no_event)

    def advance(self, ms: int) -> None:
        """Let ``ms`` milliseconds pass, for the holders and for the backend."""
        self.clock.advance(milliseconds=ms)
        self._pass_time(ms)

    def close(self) -> None:
        return None

    def __enter__(self) -> Coordination:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Twin(Coordination):
    """The twins on :class:`~memjobs_worker.lease.InMemoryKeys`: no server."""

    def __init__(self) -> None:
        super().__init__()
        self.keyspace = InMemoryKeys(self.clock.monotonic)

    def leases(self, name: str, owner_key: str, *, lease_ms: int, on_event: LockEvent = no_event) -> Lease:
        return self.keyspace.lease(name, owner_key, lease_ms=lease_ms, on_event=on_event)

    def scheduler(self, enqueue: Enqueue, *, lease_ms: int, delay_ms: int) -> ExtractionScheduler:
        return InMemoryExtractionScheduler(self.keyspace, enqueue, lease_ms=lease_ms, delay_ms=delay_ms)

    def _pass_time(self, ms: int) -> None:
        return None  # the keys expire on the clock itself

    def cut_off(self) -> None:
        self.keyspace.reachable = False

    def reconnect(self) -> None:
        self.keyspace.reachable = True


class OnRedis(Coordination):
    """The Redis lease and scheduler, on ``url`` (the test session's Redis, flushed
    for each test); a second connection of the test's own moves time and
    survives :meth:`cut_off`."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.client = redis.Redis.from_url(url)
        self.admin = redis.Redis.from_url(url)
        self._port = self.client.connection_pool.connection_kwargs["port"]

    def leases(self, name: str, owner_key: str, *, lease_ms: int, on_event: LockEvent = no_event) -> Lease:
        return LeaseLock(
            self.client, name, owner_key, lease_ms=lease_ms, on_event=on_event, monotonic=self.clock.monotonic
        )

    def scheduler(self, enqueue: Enqueue, *, lease_ms: int, delay_ms: int) -> ExtractionScheduler:
        return RedisExtractionScheduler(
            self.client, enqueue, lease_ms=lease_ms, delay_ms=delay_ms, monotonic=self.clock.monotonic
        )

    def _pass_time(self, ms: int) -> None:
        names = list(self.admin.scan_iter(match=f"{keys.NAMESPACE}:*", count=1000))
        ask = self.admin.pipeline(transaction=False)
        for name in names:
            ask.pttl(name)
        change = self.admin.pipeline(transaction=False)
        for name, left_ms in zip(names, ask.execute(), strict=True):
            if left_ms > ms:
                change.pexpire(name, left_ms - ms)
            elif left_ms >= 0:  # (-1: no expiry; -2: gone meanwhile)
                change.delete(name)
        change.execute()

    def cut_off(self) -> None:
        self.client.connection_pool.reset()
        self.client.connection_pool.connection_kwargs["port"] = free_port()

    def reconnect(self) -> None:
        self.client.connection_pool.reset()
        self.client.connection_pool.connection_kwargs["port"] = self._port

    def close(self) -> None:
        self.client.close()
        self.admin.close()


class OnTwinBackend:
    """A contract's test class on :class:`Twin`: its ``co`` fixture."""

    @pytest.fixture
    def co(self) -> Coordination:
        return Twin()


class OnRedisBackend:
    """A contract's test class on :class:`OnRedis`, on the test session's Redis: its ``co`` fixture."""

    @pytest.fixture
    def co(self, redis_url: str) -> Iterator[Coordination]:
        with OnRedis(redis_url) as co:
            yield co
