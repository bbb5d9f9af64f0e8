"""An owner being erased: the marker, and the workers dropping the owner's jobs.

What: :func:`hold` sets the owner's erasure marker
(:func:`memjobs_client.keys.owner_erased`) for a time; :class:`DropErasedOwners`,
a Dramatiq middleware, acknowledges unrun every job whose owner has the marker.

Why: an erasure (:mod:`memjobs_worker.lifecycle`) must not be undone by a job
queued while it runs (a gateway still sending the owner's turns, a retry coming
due, a delayed extraction): every job carries its owner's key, and a worker
checks the marker before it runs one. The marker is named by a hash of the
owner key, so it holds neither the id nor the key an erasure removes
everywhere else.

How cheaply: :func:`hold` also adds the marker to :data:`~memjobs_client.keys.ERASING`
(scored by when it expires), and each worker process reads the markers set now
from there at most every :data:`POLL_MS` (:class:`ErasureGate`), as it reads
the paused queues: no Redis round trip per job. A job is never checked against
a read begun more than :data:`POLL_MS` before it starts, so a job starting
:data:`POLL_MS` after :func:`hold` returned is dropped; :func:`settle` waits
that long, and an erasure calls it before it looks for the owner's running
jobs (those that started in between are waited for like any other).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import dramatiq
import redis
from dramatiq.broker import MessageProxy
from dramatiq.middleware import Middleware, SkipMessage

from memjobs_client import keys
from memjobs_client.contracts import content_hash
from memjobs_client.redis_seam import as_str, redis_errors
from memjobs_worker.observability.metrics import ERASED_OWNER_JOBS_DROPPED

log = logging.getLogger(__name__)


#: How long a worker trusts what it last read of the erasures under way.
POLL_MS = 1_000


def hold(client: redis.Redis, owner_key: str, hold_ms: int) -> None:
    """Set (or renew) the owner's erasure marker for ``hold_ms``, and list it
    (with the markers expired meanwhile dropped from the list).

    Raises:
        BackendUnavailable: Redis did not answer.
    """
    marker = keys.owner_erased(owner_key)
    now_ms = int(time.time() * 1000)
    with redis_errors(), client.pipeline(transaction=True) as pipe:
        pipe.set(marker, "1", px=hold_ms)
        pipe.zadd(keys.ERASING, {marker: now_ms + hold_ms})
        pipe.zremrangebyscore(keys.ERASING, "-inf", now_ms)
        pipe.execute()


def settle(held_at: float, poll_ms: int = POLL_MS) -> None:
    """Wait until every worker's next job is checked against a read of the
    erasures that began after :func:`hold` returned at ``held_at``
    (:func:`time.monotonic`): see the module."""
    time.sleep(max(0.0, held_at + poll_ms / 1000 - time.monotonic()))


class ErasureGate:
    """The erasure markers set now, as this process last read them, re-read when
    the read began ``poll_ms`` ago or more. A read that fails raises, as the
    job's own check would have: the job is not run unchecked."""

    def __init__(self, client: redis.Redis, poll_ms: int = POLL_MS) -> None:
        self.client = client
        self.poll_ms = poll_ms
        self._markers: frozenset[str] = frozenset()
        self._read_at = float("-inf")
        self._lock = threading.Lock()

    def erasing(self, owner_key: str) -> bool:
        """Whether ``owner_key`` is being erased (or was, within the hold).

        Raises:
            BackendUnavailable: Redis did not answer.
        """
        marker = keys.owner_erased(owner_key)
        with self._lock:
            began = time.monotonic() * 1000
            if began - self._read_at >= self.poll_ms:
                with redis_errors():
                    raw = self.client.zrangebyscore(keys.ERASING, int(time.time() * 1000), "+inf")
                self._markers = frozenset(as_str(m) for m in raw)
                self._read_at = began
            return marker in self._markers


class DropErasedOwners(Middleware):
    """Drop, unrun, a job whose owner is being erased (or was, within the hold).

    An erasure sets the owner's marker (:func:`memjobs_client.keys.owner_erased`)
    before it touches any store, and keeps it ``MEMJOBS_ERASE_HOLD_MS`` after it
    ends: a job queued meanwhile (a gateway still sending the owner's turns, a
    retry coming due, a delayed extraction) is acknowledged here without running,
    so it cannot write the owner's data back. The markers are read once every
    :data:`POLL_MS` per process (:class:`ErasureGate`), not once per job.
    """

    def __init__(self, client: redis.Redis, gate: ErasureGate | None = None) -> None:
        self.client = client
        self.gate = gate or ErasureGate(client)

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        payload = message.args[0] if len(message.args) == 1 else None
        key = payload.get("owner_key") if isinstance(payload, dict) else None
        if not isinstance(payload, dict) or not isinstance(key, str):
            return  # malformed: the actor's validation says so
        if not self.gate.erasing(key):
            return
        actor = message.actor_name if message.actor_name in broker.actors else "unknown"
        self._settle(key, payload)
        ERASED_OWNER_JOBS_DROPPED.labels(actor).inc()
        log.info(
            "job dropped: its owner is being erased",
            extra={"actor": actor, "message_id": message.message_id, "reason": "owner_erased"},
        )
        raise SkipMessage("owner erased")

    def _settle(self, owner_key: str, payload: dict[str, Any]) -> None:
        """Delete what the producer set for this job under the owner's key (a
        remember's queued count, a session end's marker): it would outlive the
        erasure by days, and the job it stood for is never run."""
        settled = []
        if isinstance(payload.get("source_id"), str):
            settled.append(keys.remember_queued(owner_key, payload["source_id"]))
        if isinstance(payload.get("session_id"), str):
            settled.append(keys.session_ended(owner_key, content_hash(payload["session_id"])))
        if settled:
            with redis_errors():
                self.client.delete(*settled)
