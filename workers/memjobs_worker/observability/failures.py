"""Each failure of a job, recorded on its message, so a dead letter says why
and since when.

Dramatiq's Redis broker dead-letters a message by moving the data it last
*enqueued* into ``<queue>.XQ.msgs``: what the Retries middleware learnt of the
final failure (the traceback, the retry count) lived only in the worker's
memory and is lost. :class:`RecordFailures` keeps a small record in the
message option :data:`FAILURE_OPTION` — the reason (a memjobs error's
``reason``, or the exception's class name: never its message, which may quote
input), the first and last failure times (epoch ms) and the attempts — and,
once a message is dead-lettered, writes the message as it stands (that record,
Dramatiq's ``retries`` and ``traceback`` included) over the copy in the
dead-letter hash, in one script that does nothing if the letter is already
gone.

It must come after ``Retries`` in the middleware list: "after" hooks run in
reverse, so its record is on the message before Retries re-enqueues it.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import dramatiq
import redis
from dramatiq.broker import MessageProxy
from dramatiq.common import q_name

from memjobs_client import keys
from memjobs_client.errors import MemjobsError
from memjobs_client.redis_seam import redis_best_effort
from memjobs_worker.observability.message import JobMiddleware

log = logging.getLogger(__name__)

#: The message option holding the failure record (see :func:`failure_record`).
FAILURE_OPTION = "_memjobs_failure"
#: How many times an operator replayed the message from the dead letters.
REPLAYS_OPTION = "_memjobs_replays"

_REASON = re.compile(r"[^A-Za-z0-9_.]")
REASON_CHARS = 64

#: Replace a dead letter's data only while it is still in the dead-letter set.
_REWRITE = """
if redis.call('zscore', KEYS[1], ARGV[1]) then
  redis.call('hset', KEYS[2], ARGV[1], ARGV[2])
  return 1
end
return 0
"""


def reason_of(exception: BaseException) -> str:
    """A failure's reason as a short identifier: ``model_unavailable``, ``OperationalError``."""
    raw = exception.reason if isinstance(exception, MemjobsError) else type(exception).__name__
    return _REASON.sub("_", str(raw))[:REASON_CHARS] or "unknown"


def failure_record(options: dict[str, Any]) -> dict[str, Any]:
    """The failure record of a message's options (empty when it never failed here)."""
    record = options.get(FAILURE_OPTION)
    return record if isinstance(record, dict) else {}


class RecordFailures(JobMiddleware):
    """Records every failure on the message and completes the dead letter's copy.

    Parameters:
        client: the broker's Redis client (to rewrite the dead letter).
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._rewrite = client.register_script(_REWRITE)

    def job_processed(self, broker: dramatiq.Broker, message: MessageProxy, exception: BaseException | None) -> None:
        if exception is None:
            return
        now_ms = int(time.time() * 1000)
        record = failure_record(message.options)
        message.options[FAILURE_OPTION] = {
            "reason": reason_of(exception),
            "first_ms": int(record.get("first_ms") or now_ms),
            "last_ms": now_ms,
            "attempts": int(record.get("attempts") or 0) + 1,
        }

    def after_nack(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        redis_id = message.options.get("redis_message_id")
        if not redis_id:
            return
        dead = keys.dead_letters(q_name(message.queue_name))
        with redis_best_effort() as attempt:
            self._rewrite(keys=[dead, f"{dead}.msgs"], args=[redis_id, message.encode()])
        if attempt.failed:
            # The letter keeps the data it was enqueued with: the previous failure's reason.
            log.warning("dead letter not completed: Redis did not answer", extra={"queue": q_name(message.queue_name)})
