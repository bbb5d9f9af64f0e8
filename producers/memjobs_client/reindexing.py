"""An owner's reindex between its enqueue and its end, so that ``knowledge
list`` shows the documents being indexed (``queued``, then ``indexing``)
rather than "no documents" while the workers embed.

One hash per owner (:func:`memjobs_client.keys.reindex_progress`): the
producer writes it as it queues a corpus (:func:`record_queued`: the documents'
ids and titles, how many parts), the worker marks it ``indexing`` when a part
starts (:func:`mark_indexing`) and counts the parts done (:func:`part_done`),
deleting it with the last. :data:`REINDEX_PROGRESS_TTL_S` bounds it whatever
happens to the messages (a dead letter, a reindex never consumed).
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from memjobs_client import keys
from memjobs_client.redis_seam import as_str

#: How long a recorded reindex is shown at most, in seconds (a day: a reindex
#: of a whole corpus takes minutes; one stuck longer is not "being indexed").
REINDEX_PROGRESS_TTL_S = 24 * 3600

#: Counts a part done; deletes the hash with the last (KEYS[1]).
_PART_DONE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local done = redis.call('HINCRBY', KEYS[1], 'parts_done', 1)
if done >= tonumber(redis.call('HGET', KEYS[1], 'parts') or '1') then
    redis.call('DEL', KEYS[1])
end
return done
"""


def record_queued(client: redis.Redis, owner_key: str, documents: list[tuple[str, str]], parts: int) -> None:
    """The owner's corpus is queued: ``documents`` as (doc id, title), in ``parts`` messages."""
    key = keys.reindex_progress(owner_key)
    with client.pipeline(transaction=True) as pipe:
        pipe.delete(key)
        pipe.hset(
            key,
            mapping={
                "state": "queued",
                "parts": parts,
                "parts_done": 0,
                "queued_at": time.time(),
                "documents": json.dumps(documents, ensure_ascii=False),
            },
        )
        pipe.expire(key, REINDEX_PROGRESS_TTL_S)
        pipe.execute()


def mark_indexing(client: redis.Redis, owner_key: str) -> None:
    """A part of the owner's reindex has started (nothing when none is recorded)."""
    key = keys.reindex_progress(owner_key)
    if client.exists(key):
        client.hset(key, "state", "indexing")


def part_done(client: redis.Redis, owner_key: str) -> None:
    """A part of the owner's reindex is written; the last one ends the record."""
    client.eval(_PART_DONE, 1, keys.reindex_progress(owner_key))


def read(client: redis.Redis, owner_key: str) -> dict[str, Any] | None:
    """The owner's reindex in progress: ``state``, ``documents`` [(doc id, title)],
    ``parts``, ``parts_done``, ``queued_at``; None when none is."""
    raw = client.hgetall(keys.reindex_progress(owner_key))
    if not raw:
        return None
    found = {as_str(k): as_str(v) for k, v in raw.items()}
    try:
        return {
            "state": found.get("state", "queued"),
            "documents": json.loads(found.get("documents", "[]")),
            "parts": int(found.get("parts", 1)),
            "parts_done": int(found.get("parts_done", 0)),
            "queued_at": float(found.get("queued_at", 0)),
        }
    except ValueError:
        return None
