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
"""

from __future__ import annotations

import logging
from typing import Any

import dramatiq
import redis
from dramatiq.broker import MessageProxy
from dramatiq.middleware import Middleware, SkipMessage

from memjobs_client import keys
from memjobs_client.contracts import content_hash
from memjobs_client.errors import BackendUnavailable
from memjobs_worker.observability.metrics import ERASED_OWNER_JOBS_DROPPED

log = logging.getLogger(__name__)


def hold(client: redis.Redis, owner_key: str, hold_ms: int) -> None:
    """Set (or renew) the owner's erasure marker for ``hold_ms``.

    Raises:
        BackendUnavailable: Redis did not answer.
    """
    try:
        client.set(keys.owner_erased(owner_key), "1", px=hold_ms)
    except redis.RedisError as exc:
        raise BackendUnavailable(f"Redis did not answer: {exc}") from exc


class DropErasedOwners(Middleware):
    """Drop, unrun, a job whose owner is being erased (or was, within the hold).

    An erasure sets the owner's marker (:func:`memjobs_client.keys.owner_erased`)
    before it touches any store, and keeps it ``MEMJOBS_ERASE_HOLD_MS`` after it
    ends: a job queued meanwhile (a gateway still sending the owner's turns, a
    retry coming due, a delayed extraction) is acknowledged here without running,
    so it cannot write the owner's data back. One ``EXISTS`` per job.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        payload = message.args[0] if len(message.args) == 1 else None
        key = payload.get("owner_key") if isinstance(payload, dict) else None
        if not isinstance(payload, dict) or not isinstance(key, str):
            return  # malformed: the actor's validation says so
        try:
            erased = self.client.exists(keys.owner_erased(key))
        except redis.RedisError as exc:
            raise BackendUnavailable(f"Redis did not answer: {exc}") from exc
        if not erased:
            return
        actor = message.actor_name if message.actor_name in broker.actors else "unknown"
        self._settle(key, payload)
        ERASED_OWNER_JOBS_DROPPED.labels(actor).inc()
        log.info("job dropped: its owner is being erased",
                 extra={"actor": actor, "message_id": message.message_id, "reason": "owner_erased"})
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
            try:
                self.client.delete(*settled)
            except redis.RedisError as exc:
                raise BackendUnavailable(f"Redis did not answer: {exc}") from exc
