"""Which jobs are retrying and why, kept by the workers so no report reads the
queued messages.

:class:`TrackRetrying` (a Dramatiq middleware) records a job when it fails and
is enqueued again for a retry — a counted retry or an outage's uncounted one
(:class:`~memjobs_worker.jobs.OutageRetries`) — and removes it when that
message later succeeds, is skipped, is dead-lettered or is refused. The record
is two keys (:data:`memjobs_client.keys.RETRYING`, a sorted set of message ids
by when each last failed, and :data:`~memjobs_client.keys.RETRYING_JOBS`, id →
``actor<TAB>reason<TAB>failures``): the actor, the failure's reason (a memjobs
error's ``reason`` or the exception's class name, as
:func:`~memjobs_worker.observability.failures.reason_of` gives it) and how
often it failed; never the payload, the owner or the exception's message.

:class:`RetryingRecord` reads it for ``memjobs drain`` and the console: a count
and the newest few, two round trips whatever the backlog. Bounds:

- on write, the set is trimmed to :data:`CAP` ids (the oldest go first);
- on read, ids older than ``stale_after_ms`` (:func:`stale_after_ms`: the retry
  policy's longest backoff, a dead worker's redelivery and a margin) are pruned:
  a worker that died, or lost Redis, between a failure and the job's end left
  them behind. A retry waiting longer than that behind a deep backlog drops out
  of the report until it fails again; nothing else is affected.

Order: before ``Retries`` in the middleware list ("after" hooks run in reverse,
so Retries has decided — re-enqueued, or marked the message failed — when this
runs), and after :class:`~memjobs_worker.observability.failures.RecordFailures`,
whose failure record on the message says it may be in the record: a message
that never failed costs no Redis call.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import dramatiq
import redis
from dramatiq.broker import MessageProxy

from memjobs_client import keys
from memjobs_client.contracts import QUEUE_OF
from memjobs_client.errors import SensitiveContent
from memjobs_client.redis_seam import as_str, redis_best_effort, redis_errors
from memjobs_worker.observability.failures import failure_record, reason_of
from memjobs_worker.observability.message import JobMiddleware
from memjobs_worker.observability.observe import PUT_BACK_OPTION
from memjobs_worker.settings import WorkerSettings

log = logging.getLogger(__name__)

#: Jobs kept in the record at most (the oldest failures leave first).
CAP = 10_000
#: Jobs a report shows at most (the newest failures).
SHOWN = 200
#: Stale ids removed per read at most.
PRUNE_BATCH = 500
#: Added to the longest wait between two deliveries of a retrying job.
MARGIN_MS = 600_000

#: Record a retrying job and trim the set to ARGV[4] ids (at most 1,000 per call).
_RECORD = """
redis.call('zadd', KEYS[1], ARGV[2], ARGV[1])
redis.call('hset', KEYS[2], ARGV[1], ARGV[3])
local over = math.min(redis.call('zcard', KEYS[1]) - tonumber(ARGV[4]), 1000)
if over > 0 then
  local old = redis.call('zrange', KEYS[1], 0, over - 1)
  redis.call('zrem', KEYS[1], unpack(old))
  redis.call('hdel', KEYS[2], unpack(old))
end
return over
"""


def stale_after_ms(workers: WorkerSettings) -> int:
    """How long after its last failure a job still in the record is taken for
    left behind: the longest backoff of either retry policy, a dead worker's
    redelivery (the broker's heartbeat timeout) and :data:`MARGIN_MS`."""
    return max(workers.max_backoff_ms, workers.outage_max_backoff_ms) + workers.broker_heartbeat_timeout_ms + MARGIN_MS


@dataclass(frozen=True)
class RetryingJob:
    """A job that failed and waits for (or is in) a retry: no payload, no owner."""

    message_id: str
    actor: str
    reason: str
    failures: int
    failed_ms: int  # when it last failed, epoch ms

    @property
    def queue(self) -> str:
        return QUEUE_OF.get(self.actor, "?")

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "actor": self.actor,
            "message_id": self.message_id,
            "reason": self.reason,
            "failures": self.failures,
            "failed_ms": self.failed_ms,
        }


@dataclass(frozen=True)
class Retrying:
    """How many jobs are retrying, and the newest of them."""

    total: int
    newest: list[RetryingJob]


class RetryingRecord:
    """The record of retrying jobs in Redis: written by :class:`TrackRetrying`,
    read by reports.

    Parameters:
        client: a Redis client (the broker's, in a worker).
        cap: jobs kept at most.
    """

    def __init__(self, client: redis.Redis, cap: int = CAP) -> None:
        self.client = client
        self.cap = cap
        self._record = client.register_script(_RECORD)

    def add(self, message_id: str, actor: str, reason: str, failures: int, failed_ms: int) -> None:
        """Record (or refresh) a retrying job, trimming the record to its cap."""
        self._record(
            keys=[keys.RETRYING, keys.RETRYING_JOBS],
            args=[message_id, failed_ms, f"{actor}\t{reason}\t{failures}", self.cap],
        )

    def remove(self, message_id: str) -> None:
        """Forget a job (done, skipped, dead-lettered or refused); nothing if absent."""
        with self.client.pipeline(transaction=True) as pipe:
            pipe.zrem(keys.RETRYING, message_id)
            pipe.hdel(keys.RETRYING_JOBS, message_id)
            pipe.execute()

    def read(self, *, stale_after_ms: int, shown: int = SHOWN, now_ms: int | None = None) -> Retrying:
        """The jobs that failed within ``stale_after_ms``: their count and the
        ``shown`` newest; up to :data:`PRUNE_BATCH` older ids are removed.

        Raises:
            BackendUnavailable: Redis did not answer.
        """
        cutoff = (now_ms if now_ms is not None else int(time.time() * 1000)) - stale_after_ms
        with redis_errors():
            with self.client.pipeline(transaction=False) as pipe:
                pipe.zrangebyscore(keys.RETRYING, "-inf", cutoff, start=0, num=PRUNE_BATCH)
                pipe.zcount(keys.RETRYING, f"({cutoff}", "+inf")
                pipe.zrevrangebyscore(keys.RETRYING, "+inf", f"({cutoff}", start=0, num=shown, withscores=True)
                stale, total, newest = pipe.execute()
            ids = [as_str(raw) for raw, _score in newest]
            with self.client.pipeline(transaction=False) as pipe:
                if stale:
                    pipe.zrem(keys.RETRYING, *stale)
                    pipe.hdel(keys.RETRYING_JOBS, *stale)
                if ids:
                    pipe.hmget(keys.RETRYING_JOBS, ids)
                answers = pipe.execute() if stale or ids else []
        values = answers[-1] if ids else []
        jobs = [_job(mid, value, int(score)) for mid, value, (_raw, score) in zip(ids, values, newest, strict=True)]
        return Retrying(int(total), jobs)

    def page(self, *, stale_after_ms: int, offset: int, count: int, now_ms: int | None = None) -> list[RetryingJob]:
        """``count`` jobs from ``offset``, the newest failure first (the console's pages).

        Raises:
            BackendUnavailable: Redis did not answer.
        """
        cutoff = (now_ms if now_ms is not None else int(time.time() * 1000)) - stale_after_ms
        with redis_errors():
            newest: list[tuple[Any, float]] = self.client.zrevrangebyscore(  # type: ignore[assignment]
                keys.RETRYING, "+inf", f"({cutoff}", start=offset, num=count, withscores=True
            )
            ids = [as_str(raw) for raw, _score in newest]
            values = self.client.hmget(keys.RETRYING_JOBS, ids) if ids else []
        return [_job(mid, value, int(score)) for mid, value, (_raw, score) in zip(ids, values, newest, strict=True)]

    def get(self, message_id: str) -> RetryingJob | None:
        """One job of the record, or None.

        Raises:
            BackendUnavailable: Redis did not answer.
        """
        with redis_errors():
            score = self.client.zscore(keys.RETRYING, message_id)
            value = self.client.hget(keys.RETRYING_JOBS, message_id)
        return None if score is None else _job(message_id, value, int(score))


def _job(message_id: str, value: Any, failed_ms: int) -> RetryingJob:
    actor, _, rest = as_str(value).partition("\t") if value is not None else ("?", "", "")
    reason, _, failures = rest.partition("\t")
    return RetryingJob(
        message_id, actor or "?", reason or "unknown", int(failures) if failures.isdigit() else 0, failed_ms
    )


class TrackRetrying(JobMiddleware):
    """Keeps :class:`RetryingRecord` as jobs fail, retry and end (see the module).

    Parameters:
        record: where the jobs are recorded (the broker's Redis).
    """

    def __init__(self, record: RetryingRecord) -> None:
        self.record = record

    def job_processed(self, broker: dramatiq.Broker, message: MessageProxy, exception: BaseException | None) -> None:
        if exception is None or message.failed or isinstance(exception, SensitiveContent):
            # Done, dead-lettered, or refused (acknowledged: memjobs_worker.refusals).
            self._leave(message)
            return
        # Failed and enqueued again by Retries (counted) or OutageRetries (not).
        actor = message.actor_name if message.actor_name in broker.actors else "unknown"
        failures = int(failure_record(message.options).get("attempts") or 1)
        with redis_best_effort() as attempt:
            self.record.add(message.message_id, actor, reason_of(exception), failures, int(time.time() * 1000))
        if attempt.failed:
            log.warning(
                "retrying job not recorded: Redis did not answer",
                extra={"actor": actor, "message_id": message.message_id},
            )

    def after_skip_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        if not message.options.get(PUT_BACK_OPTION):  # a paused queue's: still retrying
            self._leave(message)

    def _leave(self, message: MessageProxy) -> None:
        # Only a message that failed before may be in the record.
        if not (failure_record(message.options) or message.options.get("retries")):
            return
        with redis_best_effort() as attempt:
            self.record.remove(message.message_id)
        if attempt.failed:
            # Pruned by age on a later read.
            log.warning(
                "retrying job not removed from the record: Redis did not answer",
                extra={"message_id": message.message_id},
            )
