"""Fenced lease locks in Redis: one extraction per owner across every host.

This replaces the single-host ``learning-lock.db`` (SQLite, ``busy_timeout=0``):

1. acquire atomically — ``SET lock NX PX lease`` and, on success, ``INCR`` the
   owner's fencing counter, floored at the newest token the state store has
   seen (the caller reads it first): if Redis lost the counter (a failover to a
   lagging replica, a restart without persistence, a flush) the next token is
   still above every token ever committed, so tokens never go backwards;
   held by someone else → set the owner's dirty flag in the same script and
   fail fast (the holder will pick the work up);
2. renew the lease about every lease/3; a lease Redis says is someone else's
   is lost, and the holder stops before committing. When Redis cannot be
   reached at all (a partition, a failover) the holder cannot know: it keeps
   trying to renew and, at commit time, lets the fence decide. It starts no
   new work, though, once a whole lease has passed since the last renewal
   Redis confirmed (counted from when that renewal was sent): by then the
   lease has expired in Redis whatever happened, and another host may hold it;
3. every ledger commit carries the fencing token (the store refuses old ones,
   and a newer holder records its token before it touches anything), so a
   holder cut off from Redis commits only if nobody took the owner meanwhile;
4. release atomically — if the dirty flag is set, clear it, keep the lease and
   tell the holder to loop again (no wake-up is lost); else compare-and-delete.

Keys carry sha256(owner id), never the id itself.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Literal

import redis

from memjobs_client import keys
from memjobs_client.errors import BackendUnavailable, LockLost

_ACQUIRE = """
if KEYS[4] then
  redis.call('DEL', KEYS[4])
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local token = redis.call('INCR', KEYS[2])
  local floor = tonumber(ARGV[4])
  if token <= floor then
    token = floor + 1
    redis.call('SET', KEYS[2], token)
  end
  return token
end
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
return false
"""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 'lost'
end
if redis.call('DEL', KEYS[2]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 'again'
end
redis.call('DEL', KEYS[1])
return 'released'
"""

ReleaseOutcome = Literal["released", "again", "lost"]
LockEvent = Callable[[str], None]


def _noop(_: str) -> None:
    return None


class LeaseLock:
    """One holder at a time for (``name``, owner), with a fencing token.

    Parameters:
        client: a redis-py client.
        name: what is locked, e.g. ``"learn"``; keys are per name and owner.
        owner_key: sha256 of the owner id.
        lease_ms: how long the lease lasts without renewal.
        on_event: called with ``acquired``/``busy``/``renewed``/``lost``/``released``
            (metrics hook; never given the owner).
    """

    def __init__(
        self,
        client: redis.Redis,
        name: str,
        owner_key: str,
        *,
        lease_ms: int,
        on_event: LockEvent = _noop,
    ) -> None:
        self.client = client
        self.lease_ms = lease_ms
        self.on_event = on_event
        self.lock_key = keys.lock(name, owner_key)
        self.fence_key = keys.lock_fence(name, owner_key)
        self.dirty_key = keys.lock_dirty(name, owner_key)
        self.value = secrets.token_hex(16)
        self.token: int | None = None
        self.lost = threading.Event()
        #: Redis could not be asked at the last renewal (the lease may still be ours).
        self.unreachable = False
        #: When the last acquire or renewal Redis confirmed was sent (monotonic s).
        self._confirmed_at = -math.inf
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def try_acquire(self, floor: int = 0, *, clear: str | None = None) -> int | None:
        """The fencing token, or None (dirty flag set) when someone holds the lock.

        ``floor``: the newest token the state store has accepted for this owner;
        the token returned is always greater than it, whatever Redis forgot.
        ``clear``: a key deleted first, whatever the outcome, in the same round
        trip (the extraction's "scheduled" flag).
        """
        sent = time.monotonic()
        try:
            token = self._acquire(
                keys=[self.lock_key, self.fence_key, self.dirty_key, *([clear] if clear else [])],
                args=[self.value, self.lease_ms, self.lease_ms * 4, max(0, int(floor))],
            )
        except redis.RedisError as exc:
            raise BackendUnavailable(f"Redis did not answer the lock: {exc}") from exc
        if token is None:
            self.on_event("busy")
            return None
        self.token = int(token)
        self._confirmed_at = sent
        self.lost.clear()
        self.on_event("acquired")
        return self.token

    def renew(self) -> bool:
        """Extend the lease; False when it is not extended: ``lost`` set when Redis
        says it is no longer ours, ``unreachable`` when Redis did not answer."""
        sent = time.monotonic()
        try:
            ok = bool(self._renew(keys=[self.lock_key], args=[self.value, self.lease_ms]))
        except redis.RedisError:
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
        """True when the lease is surely gone: Redis said so, or no renewal has
        been confirmed for a whole lease (Redis expired it meanwhile, whether
        or not it could be asked). New work must not start on it."""
        return self.lost.is_set() or time.monotonic() - self._confirmed_at >= self.lease_ms / 1000

    def ensure_held(self) -> None:
        """Raise before a commit if the lease was lost; renew it otherwise.

        If Redis does not answer, return: whether the lease is still ours cannot
        be known, and the commit's fencing check in the ledger decides (a newer
        holder has recorded its token before touching anything).

        Raises:
            LockLost: Redis says the lease expired or another holder took it.
        """
        if self.lost.is_set() or not (self.renew() or self.unreachable):
            raise LockLost("the learning lease was lost before commit")
        if self.unreachable:
            self.on_event("unverified")

    def release(self) -> ReleaseOutcome:
        """Release, or keep the lease and return ``again`` when work arrived meanwhile."""
        try:
            outcome = self._release(
                keys=[self.lock_key, self.dirty_key], args=[self.value, self.lease_ms]
            )
        except redis.RedisError as exc:
            raise BackendUnavailable(f"Redis did not answer the release: {exc}") from exc
        text = outcome.decode() if isinstance(outcome, bytes) else str(outcome)
        result: ReleaseOutcome = "released" if text == "released" else "again" if text == "again" else "lost"
        if result == "released":
            self.on_event("released")
        elif result == "lost":
            self.on_event("lost")
        return result

    def abandon(self) -> None:
        """Compare-and-delete without looking at the dirty flag (after a failure)."""
        try:
            self.client.eval(
                "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
                1, self.lock_key, self.value,
            )
        except redis.RedisError:
            pass  # the lease expires by itself

    # -- renewal in the background while the holder works ------------------------------

    def __enter__(self) -> LeaseLock:
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
