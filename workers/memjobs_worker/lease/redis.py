"""The lease in Redis: fenced, shared by every host (production).

This replaced the single-host ``learning-lock.db`` (SQLite, ``busy_timeout=0``).
Each step of :class:`~memjobs_worker.lease.base.Lease` is one Lua script, so it
is atomic and one round trip: acquire is ``SET lock NX PX lease`` then ``INCR``
the owner's fencing counter (floored at the caller's floor: if Redis lost the
counter — a failover to a lagging replica, a restart without persistence, a
flush — the next token is still above every token ever committed), or, when
held, the dirty flag set in the same script. Redis errors become
:class:`~memjobs_client.errors.BackendUnavailable`.
"""

from __future__ import annotations

import time

import redis

from memjobs_client.redis_seam import as_str, redis_errors
from memjobs_worker.lease.base import (
    DIRTY_LEASES,
    Lease,
    LeaseFactory,
    LockEvent,
    Monotonic,
    ReleaseOutcome,
    no_event,
)

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

_ABANDON = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class LeaseLock(Lease):
    """The fenced lease on Redis.

    Parameters:
        client: a redis-py client.
        name, owner_key, lease_ms, on_event, monotonic: see :class:`Lease`.
    """

    def __init__(
        self,
        client: redis.Redis,
        name: str,
        owner_key: str,
        *,
        lease_ms: int,
        on_event: LockEvent = no_event,
        monotonic: Monotonic = time.monotonic,
    ) -> None:
        super().__init__(name, owner_key, lease_ms=lease_ms, on_event=on_event, monotonic=monotonic)
        self.client = client
        self._acquire_script = client.register_script(_ACQUIRE)
        self._renew_script = client.register_script(_RENEW)
        self._release_script = client.register_script(_RELEASE)
        self._abandon_script = client.register_script(_ABANDON)

    def _acquire(self, floor: int, clear: str | None) -> int | None:
        with redis_errors("Redis did not answer the lock"):
            token = self._acquire_script(
                keys=[self.lock_key, self.fence_key, self.dirty_key, *([clear] if clear else [])],
                args=[self.value, self.lease_ms, self.lease_ms * DIRTY_LEASES, floor],
            )
        return None if token is None else int(token)

    def _extend(self) -> bool:
        with redis_errors("Redis did not answer the renewal"):
            return bool(self._renew_script(keys=[self.lock_key], args=[self.value, self.lease_ms]))

    def _release(self) -> ReleaseOutcome:
        with redis_errors("Redis did not answer the release"):
            outcome = self._release_script(keys=[self.lock_key, self.dirty_key], args=[self.value, self.lease_ms])
        text = as_str(outcome)
        return "released" if text == "released" else "again" if text == "again" else "lost"

    def _abandon(self) -> None:
        with redis_errors("Redis did not answer the abandon"):
            self._abandon_script(keys=[self.lock_key], args=[self.value])


def redis_leases(client: redis.Redis) -> LeaseFactory:
    """Leases on ``client``'s Redis, for whoever is given a :class:`LeaseFactory`."""

    def lease(name: str, owner_key: str, *, lease_ms: int, on_event: LockEvent = no_event) -> Lease:
        return LeaseLock(client, name, owner_key, lease_ms=lease_ms, on_event=on_event)

    return lease
