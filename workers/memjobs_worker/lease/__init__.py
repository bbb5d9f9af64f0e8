"""Fenced leases: one holder per (name, owner) across every host.

- :mod:`~memjobs_worker.lease.base`: the seam, :class:`Lease` (the holder's
  bookkeeping: token, renewal, expiry, release outcomes) and :class:`LeaseFactory`.
- :mod:`~memjobs_worker.lease.redis`: :class:`LeaseLock`, on Redis (production).
- :mod:`~memjobs_worker.lease.stub`: the twin, :class:`InMemoryLease` on
  :class:`InMemoryKeys`, on a clock it is given.
"""

from memjobs_worker.lease.base import Lease, LeaseFactory, LockEvent, ReleaseOutcome
from memjobs_worker.lease.redis import LeaseLock, redis_leases
from memjobs_worker.lease.stub import InMemoryKeys, InMemoryLease

__all__ = [
    # the seam
    "Lease",
    "LeaseFactory",
    "LockEvent",
    "ReleaseOutcome",
    # on Redis
    "LeaseLock",
    "redis_leases",
    # the twin
    "InMemoryKeys",
    "InMemoryLease",
]
