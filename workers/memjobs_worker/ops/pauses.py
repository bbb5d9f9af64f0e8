"""Pausing a queue: one Redis hash every worker host obeys.

An operator pauses a queue (the console, ``memjobs queue pause``); the flag is
a field of :data:`~memjobs_client.keys.PAUSED_QUEUES` (queue → when, epoch ms).
Every worker's consumer of that queue asks :class:`PauseGate` before it fetches
and, while the queue is paused, fetches nothing and puts back what it had
prefetched (:mod:`memjobs_worker.broker`). The messages stay in the queue:
nothing is acknowledged, retried, counted as an attempt or dead-lettered, and
they are processed once the queue is resumed. Delayed messages keep coming due
into the paused queue, where they wait too. A job already running finishes.

The gate caches the flags for :data:`POLL_MS`, so a pause is obeyed by every
host within about that long and costs one HGETALL per process per poll, not
one per message.
"""

from __future__ import annotations

import logging
import threading
import time

import dramatiq
import redis
from dramatiq.broker import MessageProxy
from dramatiq.middleware import Middleware, SkipMessage

from memjobs_client import keys
from memjobs_client.contracts import QUEUES
from memjobs_client.errors import BackendUnavailable
from memjobs_client.redis_seam import as_str, redis_errors
from memjobs_worker.observability.observe import PUT_BACK_OPTION

log = logging.getLogger(__name__)

#: How long a worker trusts what it last read of the paused queues.
POLL_MS = 1_000


class QueuePauses:
    """Pause, resume and list paused queues.

    Parameters:
        client: Redis (the broker's, or the API's).
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def pause(self, queue: str, now_ms: int | None = None) -> bool:
        """Pause ``queue``; False if it was already paused.

        Raises:
            ValueError: no such queue.
            BackendUnavailable: Redis did not answer.
        """
        _check(queue)
        at = int(time.time() * 1000) if now_ms is None else now_ms
        with redis_errors(f"Redis did not pause {queue}"):
            return bool(self.client.hsetnx(keys.PAUSED_QUEUES, queue, at))

    def resume(self, queue: str) -> bool:
        """Resume ``queue``; False if it was not paused.

        Raises:
            ValueError: no such queue.
            BackendUnavailable: Redis did not answer.
        """
        _check(queue)
        with redis_errors(f"Redis did not resume {queue}"):
            return bool(self.client.hdel(keys.PAUSED_QUEUES, queue))

    def paused(self) -> dict[str, int]:
        """Paused queues → when each was paused (epoch ms).

        Raises:
            BackendUnavailable: Redis did not answer.
        """
        with redis_errors():
            raw = self.client.hgetall(keys.PAUSED_QUEUES)
        out: dict[str, int] = {}
        for name, at in raw.items():
            value = as_str(at)
            out[as_str(name)] = int(value) if value.isdigit() else 0
        return out


def _check(queue: str) -> None:
    if queue not in QUEUES:
        raise ValueError(f"no queue {queue!r}: one of {', '.join(QUEUES)}")


class PauseGate:
    """What a worker process believes is paused, re-read at most every ``poll_ms``.

    When Redis does not answer, the last answer stands (the consumer's own fetch
    will fail and reconnect as usual).
    """

    def __init__(self, client: redis.Redis, poll_ms: int = POLL_MS) -> None:
        self.pauses = QueuePauses(client)
        self.poll_ms = poll_ms
        self._paused: frozenset[str] = frozenset()
        self._read_at = float("-inf")
        self._lock = threading.Lock()

    def is_paused(self, queue: str) -> bool:
        """Whether ``queue`` is paused (a delay queue never is: its messages come due
        into their paused queue and wait there)."""
        now = time.monotonic() * 1000
        with self._lock:
            if now - self._read_at >= self.poll_ms:
                self._read_at = now
                try:
                    self._paused = frozenset(self.pauses.paused())
                except BackendUnavailable:
                    pass
            return queue in self._paused


class HonourPauses(Middleware):
    """Put back, untouched, a message of a paused queue that reached a worker thread.

    The consumer fetches nothing from a paused queue, but messages it handed to
    this process before the pause wait in the process's work queue. Such a
    message is moved from this consumer's unacknowledged set back to the end of
    its queue (the broker's own ``requeue``: same id, same data, its retry count
    untouched) and skipped; the acknowledgement that follows a skip then finds
    nothing of it to delete. The other middleware see :data:`PUT_BACK_OPTION`
    and neither count the skip nor touch the retrying record.

    First in the middleware list, so no other ``before_process_message`` ran.
    """

    def __init__(self, gate: PauseGate) -> None:
        self.gate = gate

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        if not self.gate.is_paused(message.queue_name):
            return
        redis_id = message.options.get("redis_message_id")
        requeue = getattr(broker, "do_requeue", None)
        if redis_id is None or requeue is None:
            return  # not a Redis message: nothing to put back, so run it
        requeue(message.queue_name, redis_id)
        message.options[PUT_BACK_OPTION] = True
        log.info(
            "message of a paused queue put back",
            extra={"queue": message.queue_name, "message_id": message.message_id, "reason": "queue_paused"},
        )
        raise SkipMessage("queue paused")
