"""The lease's twin: leases, fencing counters and flags in process memory.

Like dramatiq's ``StubBroker``, it does not pretend to be Redis. It keeps what
the coordination of extraction needs — the owners' leases, their fencing
counters, their dirty and "scheduled" flags — as keys with an expiry on a clock
it is given, and does each step of the lease under one lock, as Redis runs a
script. Time passes when that clock says so, and for nothing else: a test moves
it to expire a lease or a flag.

:class:`InMemoryKeys` is the state that the Redis lease and the Redis scheduler
share on a server; :class:`InMemoryLease` and
:class:`~memjobs_worker.memory.intake.InMemoryExtractionScheduler` share it here, under
the same key names, so that acquiring a lease clears the owner's "scheduled"
flag and the sweep sees which leases are held. Setting
:attr:`InMemoryKeys.reachable` to False stages a partition: every step then
raises :class:`~memjobs_client.errors.BackendUnavailable`, as a Redis that does
not answer does.

``tests/memory/test_lease_contract.py`` and
``tests/memory/test_scheduler_contract.py`` hold the twins and the Redis ones
to the same contract.
"""

from __future__ import annotations

import math
import threading

from memjobs_client.errors import BackendUnavailable
from memjobs_worker.lease.base import (
    DIRTY_LEASES,
    Lease,
    LockEvent,
    Monotonic,
    ReleaseOutcome,
    no_event,
)


class InMemoryKeys:
    """Keys with an optional expiry on ``monotonic`` (seconds).

    Only what the twins use: get, set (``nx``, ``px``), delete, exists, a
    counter and an expiry. Each call is atomic; hold :attr:`lock` to make
    several one step.
    """

    def __init__(self, monotonic: Monotonic) -> None:
        self.monotonic = monotonic
        #: False: every call raises BackendUnavailable (a partition staged by a test).
        self.reachable = True
        self.lock = threading.RLock()
        self._keys: dict[str, tuple[str, float]] = {}  # key → (value, expires at or inf)

    def _check(self) -> None:
        if not self.reachable:
            raise BackendUnavailable("the in-memory keys are cut off (a partition the test staged)")

    def get(self, key: str) -> str | None:
        with self.lock:
            self._check()
            entry = self._keys.get(key)
            if entry is None:
                return None
            if entry[1] <= self.monotonic():
                del self._keys[key]
                return None
            return entry[0]

    def exists(self, key: str) -> bool:
        return self.get(key) is not None

    def set(self, key: str, value: str, *, px: int | None = None, nx: bool = False) -> bool:
        """Whether it was set (``nx``: only if absent); ``px``: expires in so many ms."""
        with self.lock:
            if nx and self.get(key) is not None:
                return False
            self._check()
            self._keys[key] = (value, math.inf if px is None else self.monotonic() + px / 1000)
            return True

    def delete(self, *keys: str) -> int:
        """How many of ``keys`` existed."""
        with self.lock:
            gone = [key for key in keys if self.get(key) is not None]
            for key in gone:
                del self._keys[key]
            return len(gone)

    def pexpire(self, key: str, px: int) -> bool:
        with self.lock:
            value = self.get(key)
            if value is None:
                return False
            self._keys[key] = (value, self.monotonic() + px / 1000)
            return True

    def incr(self, key: str) -> int:
        with self.lock:
            value = int(self.get(key) or 0) + 1
            self._keys[key] = (str(value), self._keys.get(key, ("", math.inf))[1])
            return value

    def lease(self, name: str, owner_key: str, *, lease_ms: int, on_event: LockEvent = no_event) -> InMemoryLease:
        """A lease on these keys (a :class:`~memjobs_worker.lease.base.LeaseFactory`)."""
        return InMemoryLease(self, name, owner_key, lease_ms=lease_ms, on_event=on_event)


class InMemoryLease(Lease):
    """The fenced lease on :class:`InMemoryKeys`, on their clock.

    The renewer thread of ``with lease:`` waits in real time, like the Redis
    lease's; it renews on the keys' clock, so a test that moves that clock
    decides when the lease runs out, not the thread.
    """

    def __init__(
        self, keyspace: InMemoryKeys, name: str, owner_key: str, *, lease_ms: int, on_event: LockEvent = no_event
    ) -> None:
        super().__init__(name, owner_key, lease_ms=lease_ms, on_event=on_event, monotonic=keyspace.monotonic)
        self.keyspace = keyspace

    def _acquire(self, floor: int, clear: str | None) -> int | None:
        with self.keyspace.lock:
            if clear:
                self.keyspace.delete(clear)
            if not self.keyspace.set(self.lock_key, self.value, px=self.lease_ms, nx=True):
                self.keyspace.set(self.dirty_key, "1", px=self.lease_ms * DIRTY_LEASES)
                return None
            token = self.keyspace.incr(self.fence_key)
            if token <= floor:
                token = floor + 1
                self.keyspace.set(self.fence_key, str(token))
            return token

    def _extend(self) -> bool:
        with self.keyspace.lock:
            return self.keyspace.get(self.lock_key) == self.value and self.keyspace.pexpire(
                self.lock_key, self.lease_ms
            )

    def _release(self) -> ReleaseOutcome:
        with self.keyspace.lock:
            if self.keyspace.get(self.lock_key) != self.value:
                return "lost"
            if self.keyspace.delete(self.dirty_key):
                self.keyspace.pexpire(self.lock_key, self.lease_ms)
                return "again"
            self.keyspace.delete(self.lock_key)
            return "released"

    def _abandon(self) -> None:
        with self.keyspace.lock:
            if self.keyspace.get(self.lock_key) == self.value:
                self.keyspace.delete(self.lock_key)
