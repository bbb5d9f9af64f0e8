"""The worker's half of the queued-remember count (:mod:`memjobs_client.queued`):
a forget reads it, and a remember leaving the queue for good deletes it.

:func:`holds` is one ``GET``: a forget's "did this owner send that source?"
costs the same with three or three million messages queued.

:class:`SettleQueuedRemembers`, a Dramatiq middleware, deletes the count once
a remember's message is acknowledged: the actor took it into the ledger (every
outcome of :meth:`~memjobs_worker.memory.store.base.StateStore.add_source`
leaves a row, which answers every later forget), or refused it as sensitive
(acknowledged, never stored: :mod:`memjobs_worker.refusals`). The ledger is
written before the count goes, so a forget that reads the ledger, then the
count, then the ledger again cannot miss a remember consumed in between. One
acknowledged remember settles the source for every other copy queued: those
find the row too. A message that is retried keeps its count; a dead-lettered
one too (an operator may retry it); the TTL bounds both. Counts are deleted in
batches (one ``DEL`` for many): a remember job costs no extra round trip of
its own.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

import dramatiq
import redis
from dramatiq.broker import MessageProxy

from memjobs_client import keys
from memjobs_client.contracts import ACTOR_REMEMBER
from memjobs_client.errors import SensitiveContent
from memjobs_client.redis_seam import redis_best_effort, redis_errors
from memjobs_worker.observability.message import JobMiddleware
from memjobs_worker.observability.ticker import Ticker

log = logging.getLogger(__name__)

_OWNER_KEY = re.compile(r"[0-9a-f]{64}")
_SOURCE_ID = re.compile(r"src_[0-9a-f]{32}")


def holds(client: redis.Redis, owner_key: str, source_id: str) -> bool:
    """Whether a remember of the owner's source is counted as queued (not yet in
    the ledger, or its count not yet settled). One ``GET``.

    Raises:
        BackendUnavailable: Redis did not answer.
    """
    with redis_errors():
        count = client.get(keys.remember_queued(owner_key, source_id))
    return count is not None and int(count) > 0


class SettleQueuedRemembers(JobMiddleware):
    """Delete a remember's queued count once its message is acknowledged
    (see the module's docstring), in batches: one ``DEL`` for up to ``batch``
    counts, at least every ``flush_ms`` while the worker runs, and the rest
    when it stops. A count settled late only answers what the ledger's row
    already answers; one Redis does not let go of (or a killed worker never
    sent) lasts until its TTL."""

    def __init__(self, client: redis.Redis, *, batch: int = 100, flush_ms: int = 100) -> None:
        self.client = client
        self.batch = batch
        self.flush_ms = flush_ms
        self._settled: list[str] = []
        self._lock = threading.Lock()
        self._flusher = Ticker("memjobs-settle-remembers", self.flush, lambda: self.flush_ms / 1000)

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._flusher.start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._flusher.stop()

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self.flush()  # what the last jobs settled

    def job_processed(self, broker: dramatiq.Broker, message: MessageProxy, exception: BaseException | None) -> None:
        if message.actor_name != ACTOR_REMEMBER:
            return
        if exception is not None and not isinstance(exception, SensitiveContent):
            return  # retried or dead-lettered: it may still be taken into the ledger
        named = _named(message.args)
        if named is None:
            return  # not a remember a producer counted
        with self._lock:
            self._settled.append(keys.remember_queued(*named))
            full = len(self._settled) >= self.batch
        if full:
            self.flush()

    def flush(self) -> None:
        """Delete the counts settled so far, in one command."""
        with self._lock:
            settled, self._settled = self._settled, []
        if not settled:
            return
        with redis_best_effort() as attempt:
            self.client.delete(*settled)
        if attempt.failed:
            log.warning(
                "queued remembers' counts were not settled: they last until their TTL",
                extra={"actor": ACTOR_REMEMBER, "reason": "redis_unavailable", "count": len(settled)},
            )


def _named(args: tuple[Any, ...]) -> tuple[str, str] | None:
    """(owner key, source id) of a remember's payload, when both are well formed."""
    payload = args[0] if len(args) == 1 and isinstance(args[0], dict) else None
    if payload is None:
        return None
    owner_key, source_id = payload.get("owner_key"), payload.get("source_id")
    if (
        isinstance(owner_key, str)
        and _OWNER_KEY.fullmatch(owner_key)
        and isinstance(source_id, str)
        and _SOURCE_ID.fullmatch(source_id)
    ):
        return owner_key, source_id
    return None
