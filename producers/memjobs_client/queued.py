"""The owner's queued remembers, recorded by the producer as it enqueues them.

A forget must tell a source the owner sent, whose remember is still queued
(``forgotten``: the remember, when it runs, finds the source forgotten), from
one the owner never sent (``not_found``). The ledger cannot say: a queued
remember is not in it yet. So each remember is counted, before its message is
enqueued, in a key of its own (:func:`memjobs_client.keys.remember_queued`:
sha256(owner) and the source id, never the owner's id), and a forget reads
that one key: one Redis command, whatever the backlog.

The key's life, end to end:

- :func:`record`, here, before the enqueue (``INCR`` and ``PEXPIRE`` in one
  ``MULTI``): a remember whose message is queued is always counted; one whose
  enqueue failed is taken back (:func:`take_back`), so a failed remember does
  not make an unsent source look sent.
- The worker deletes the key once a remember of the source has left the queue
  for good: taken into the ledger (which then answers every forget), or
  refused (:mod:`memjobs_worker.memory.queued`). A retried remember stays
  counted; a dead-lettered one too, as an operator may retry it.
- :data:`QUEUED_REMEMBER_TTL_S` bounds every key whatever happens to its
  message (a dead letter purged, a message lost with Redis's data): longer
  than Dramatiq keeps a dead letter (7 days), so a dead-lettered remember
  retried by an operator is still honoured.

A key counts remembers of one (owner, source) only: another owner's remember of
the same id is another key, so a forget can overtake only its owner's own.
"""

from __future__ import annotations

import redis

from memjobs_client import keys
from memjobs_client.redis_seam import redis_best_effort

#: How long a recorded remember counts at most, in seconds (8 days: Dramatiq
#: keeps a dead letter 7 days; retries and outage budgets are far shorter).
QUEUED_REMEMBER_TTL_S = 8 * 24 * 3600

#: Decrements KEYS[1] and deletes it at zero (a remember whose enqueue failed).
_TAKE_BACK = """
if redis.call('DECR', KEYS[1]) <= 0 then redis.call('DEL', KEYS[1]) end
return 1
"""


def record(client: redis.Redis, owner_key: str, source_id: str) -> None:
    """Count one remember of the owner's source as queued (its TTL renewed).

    Raises:
        redis.RedisError: Redis did not take it (nothing may be enqueued then).
    """
    pipe = client.pipeline(transaction=True)
    key = keys.remember_queued(owner_key, source_id)
    pipe.incr(key)
    pipe.expire(key, QUEUED_REMEMBER_TTL_S)
    pipe.execute()


def take_back(client: redis.Redis, owner_key: str, source_id: str) -> None:
    """Undo :func:`record` for a remember whose enqueue failed. Best effort:
    when Redis does not answer either, the count outlives the failed remember
    until its TTL, and a forget of that source meanwhile answers ``forgotten``
    (a forgotten marker in the ledger, which a later remember overrides)."""
    with redis_best_effort():
        client.eval(_TAKE_BACK, 1, keys.remember_queued(owner_key, source_id))
