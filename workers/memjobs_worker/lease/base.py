"""The lease seam: one holder at a time for (name, owner), with a fencing token.

:class:`Lease` keeps the holder's bookkeeping (its token, whether the lease was
lost, when a renewal was last confirmed, the renewer thread, the events) and
leaves four atomic steps to a backend: acquire, extend, release, abandon.
:class:`~memjobs_worker.lease.redis.LeaseLock` does them in Redis scripts;
:class:`~memjobs_worker.lease.stub.InMemoryLease` in process memory on a
clock it is given. ``tests/memory/test_lease_contract.py`` holds both to the
same contract.

The protocol, whatever the backend:

1. acquire atomically — take the lease if nobody holds it (it lasts
   ``lease_ms``) and return the next fencing token, floored at the newest token
   the state store has seen (the caller reads it first), so tokens never go
   backwards even when the backend lost its counter; held by someone else →
   set the owner's dirty flag (it lasts four leases) and fail fast (the holder
   will pick the work up);
2. renew the lease about every lease/3; a lease the backend says is someone
   else's is lost, and the holder stops before committing. When the backend
   cannot be reached at all (a partition, a failover) the holder cannot know:
   it keeps trying to renew and, at commit time, lets the fence decide. It
   starts no new work, though, once a whole lease has passed since the last
   renewal the backend confirmed (counted from when that renewal was sent): by
   then the lease has expired whatever happened, and another host may hold it;
3. every ledger commit carries the fencing token (the store refuses old ones,
   and a newer holder records its token before it touches anything), so a
   holder cut off from the backend commits only if nobody took the owner meanwhile;
4. release atomically — if the dirty flag is set, clear it, keep the lease and
   tell the holder to loop again (no wake-up is lost); else compare-and-delete.

Keys carry sha256(owner id), never the id itself.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Literal, Protocol

from memjobs_client import keys
from memjobs_client.errors import BackendUnavailable, LockLost

ReleaseOutcome = Literal["released", "again", "lost"]
LockEvent = Callable[[str], None]
#: Seconds that only go forward (``time.monotonic`` unless a test gives one).
Monotonic = Callable[[], float]

#: The owner's dirty flag lasts this many leases.
DIRTY_LEASES = 4


def no_event(_: str) -> None:
    return None


class Lease(ABC):
    """One holder at a time for (``name``, owner), with a fencing token.

    Parameters:
        name: what is locked, e.g. ``"learn"``; keys are per name and owner.
        owner_key: sha256 of the owner id.
        lease_ms: how long the lease lasts without renewal.
        on_event: called with ``acquired``/``busy``/``renewed``/``lost``/
            ``released``/``unverified`` (metrics hook; never given the owner).
        monotonic: the holder's clock, in seconds, for :meth:`expired`.
    """

    def __init__(
        self,
        name: str,
        owner_key: str,
        *,
        lease_ms: int,
        on_event: LockEvent = no_event,
        monotonic: Monotonic = time.monotonic,
    ) -> None:
        self.lease_ms = lease_ms
        self.on_event = on_event
        self.monotonic = monotonic
        self.lock_key = keys.lock(name, owner_key)
        self.fence_key = keys.lock_fence(name, owner_key)
        self.dirty_key = keys.lock_dirty(name, owner_key)
        #: This holder's mark on the lease (compare-and-delete compares it).
        self.value = secrets.token_hex(16)
        self.token: int | None = None
        self.lost = threading.Event()
        #: The backend could not be asked at the last renewal (the lease may still be ours).
        self.unreachable = False
        #: When the last acquire or renewal the backend confirmed was sent (``monotonic`` s).
        self._confirmed_at = -math.inf
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # -- what a backend does, each step atomic ------------------------------------------
    # Each step raises BackendUnavailable when the backend did not answer.

    @abstractmethod
    def _acquire(self, floor: int, clear: str | None) -> int | None:
        """Delete ``clear`` (when given) whatever the outcome; then take the lease
        and return the next token (above ``floor`` and every token before), or
        set the dirty flag and return None when someone holds it."""

    @abstractmethod
    def _extend(self) -> bool:
        """Extend the lease by ``lease_ms`` if it is still ours; whether it was."""

    @abstractmethod
    def _release(self) -> ReleaseOutcome:
        """``lost`` when the lease is not ours; ``again`` (dirty flag cleared, the
        lease extended by ``lease_ms``) when work arrived; else ``released``."""

    @abstractmethod
    def _abandon(self) -> None:
        """Delete the lease if it is ours, ignoring the dirty flag."""

    # -- the holder's side ----------------------------------------------------------------

    def try_acquire(self, floor: int = 0, *, clear: str | None = None) -> int | None:
        """The fencing token, or None (dirty flag set) when someone holds the lock.

        ``floor``: the newest token the state store has accepted for this owner;
        the token returned is always greater than it, whatever the backend forgot.
        ``clear``: a key deleted first, whatever the outcome, in the same step
        (the extraction's "scheduled" flag).

        Raises:
            BackendUnavailable: the backend did not answer.
        """
        sent = self.monotonic()
        token = self._acquire(max(0, int(floor)), clear)
        if token is None:
            self.on_event("busy")
            return None
        self.token = token
        self._confirmed_at = sent
        self.lost.clear()
        self.on_event("acquired")
        return token

    def renew(self) -> bool:
        """Extend the lease; False when it is not extended: ``lost`` set when the
        backend says it is no longer ours, ``unreachable`` when it did not answer."""
        sent = self.monotonic()
        try:
            ok = self._extend()
        except BackendUnavailable:
            self.unreachable = True
            return False
        self.unreachable = False
        if ok:
            self._confirmed_at = max(self._confirmed_at, sent)  # two threads renew
            self.on_event("renewed")
        elif not self.lost.is_set():
            self.lost.set()
            self.on_event("lost")
        return ok

    def expired(self) -> bool:
        """True when the lease is surely gone: the backend said so, or no renewal
        has been confirmed for a whole lease (it expired meanwhile, whether or
        not the backend could be asked). New work must not start on it."""
        return self.lost.is_set() or self.monotonic() - self._confirmed_at >= self.lease_ms / 1000

    def ensure_held(self) -> None:
        """Raise before a commit if the lease was lost; renew it otherwise.

        If the backend does not answer, return: whether the lease is still ours
        cannot be known, and the commit's fencing check in the ledger decides (a
        newer holder has recorded its token before touching anything).

        Raises:
            LockLost: the backend says the lease expired or another holder took it.
        """
        if self.lost.is_set() or not (self.renew() or self.unreachable):
            raise LockLost("the learning lease was lost before commit")
        if self.unreachable:
            self.on_event("unverified")

    def release(self) -> ReleaseOutcome:
        """Release, or keep the lease and return ``again`` when work arrived meanwhile.

        Raises:
            BackendUnavailable: the backend did not answer (the lease expires by itself).
        """
        result = self._release()
        if result == "released":
            self.on_event("released")
        elif result == "lost":
            self.on_event("lost")
        return result

    def abandon(self) -> None:
        """Compare-and-delete without looking at the dirty flag (after a failure)."""
        try:
            self._abandon()
        except BackendUnavailable:
            pass  # the lease expires by itself

    # -- renewal in the background while the holder works ------------------------------

    def __enter__(self) -> Lease:
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew_loop, name="lease-renewer", daemon=True)
        self._renewer.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()

    def _renew_loop(self) -> None:
        interval_s = self.lease_ms / 3000
        while not self._stop.wait(interval_s):
            if not self.renew() and not self.unreachable:
                return  # taken: nothing left to renew


class LeaseFactory(Protocol):
    """Makes the lease for (``name``, owner) on one backend: what the pipeline is given."""

    def __call__(self, name: str, owner_key: str, *, lease_ms: int, on_event: LockEvent = no_event) -> Lease: ...
