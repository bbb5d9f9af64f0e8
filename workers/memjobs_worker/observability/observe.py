"""Job outcomes as metrics, recent-throughput counts and one log line per job.

Actors say how a job ended by recording an outcome on the message
(:func:`memjobs_worker.jobs.report`: ``created``, ``duplicate``,
``skipped_busy``, …, left in the message option :data:`OUTCOME_OPTION`) or by
raising; this middleware turns that into ``memjobs_jobs_total{actor,
outcome}``, duration and queue-wait histograms, the per-minute counts of
``memjobs status`` (:class:`~memjobs_worker.observability.jobstats.JobStats`)
and a log line carrying the actor, the outcome and the reason — never payload
text. It also counts enqueued and dead-lettered messages.

A failed job is ``retried`` when the Retries middleware (which runs before this
one) re-enqueued it, and otherwise ``dead_lettered`` — or, for refusals that
are the input's fault, ``invalid_payload`` / ``memory_off``. A job refused for
sensitive content is acknowledged instead, with the outcome
``refused_sensitive`` (:mod:`memjobs_worker.refusals`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import dramatiq
from dramatiq.broker import MessageProxy

from memjobs_client.errors import MemjobsError, SensitiveContent
from memjobs_worker.observability.jobstats import JobStats
from memjobs_worker.observability.message import JobMiddleware
from memjobs_worker.observability.metrics import DEAD_LETTERED, JOB_SECONDS, JOBS, JOBS_ENQUEUED, QUEUE_WAIT_SECONDS

log = logging.getLogger("memjobs.jobs")

#: The message option in which an actor leaves its outcome for this middleware.
OUTCOME_OPTION = "_memjobs_outcome"
#: Set on a message put back in its paused queue, unprocessed
#: (:class:`memjobs_worker.ops.pauses.HonourPauses`): its skip is no outcome.
PUT_BACK_OPTION = "_memjobs_put_back"
_STARTED = "_memjobs_started"
_REFUSALS = ("invalid_payload", "memory_off")


class ObserveJobs(JobMiddleware):
    """Times every job and records how it ended.

    Parameters:
        stats: per-minute counts for ``memjobs status`` (None: not kept).
    """

    def __init__(self, stats: JobStats | None = None) -> None:
        self.stats = stats

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if self.stats is not None:
            self.stats.start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if self.stats is not None:
            self.stats.stop()

    def after_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        # A delayed message is enqueued a second time when its ETA comes: count it once.
        if delay is not None or "eta" not in message.options:
            JOBS_ENQUEUED.labels(_actor(broker, message.actor_name)).inc()

    def after_nack(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        DEAD_LETTERED.labels(message.queue_name.removesuffix(".DQ")).inc()

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        now_ms = time.time() * 1000
        ready_ms = max(message.message_timestamp, message.options.get("eta", 0))
        QUEUE_WAIT_SECONDS.labels(_actor(broker, message.actor_name)).observe(max(0.0, (now_ms - ready_ms) / 1000))
        message.options[_STARTED] = time.perf_counter()

    def job_processed(self, broker: dramatiq.Broker, message: MessageProxy, exception: BaseException | None) -> None:
        started = message.options.pop(_STARTED, None)
        recorded = message.options.pop(OUTCOME_OPTION, None)
        actor = _actor(broker, message.actor_name)
        duration_s = None if started is None else time.perf_counter() - started
        if duration_s is not None:
            JOB_SECONDS.labels(actor).observe(duration_s)
        if exception is None or (isinstance(exception, SensitiveContent) and not message.failed):
            # Done, or refused and acknowledged (memjobs_worker.refusals)
            outcome = recorded if isinstance(recorded, str) else "succeeded"
            self._count(actor, outcome, duration_s)
            log.info("job done", extra={"actor": actor, "outcome": outcome, "message_id": message.message_id})
            return
        reason = exception.reason if isinstance(exception, MemjobsError) else type(exception).__name__
        if not message.failed:
            outcome = "retried"
        elif reason in _REFUSALS:
            outcome = reason
        else:
            outcome = "dead_lettered"
        self._count(actor, outcome, duration_s)
        log.warning(
            "job failed",
            extra={
                "actor": actor,
                "outcome": outcome,
                "reason": reason,
                "message_id": message.message_id,
                "retries": message.options.get("retries", 0),
            },
        )

    def after_skip_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        if message.options.get(PUT_BACK_OPTION):
            return
        self._count(_actor(broker, message.actor_name), "skipped")

    def _count(self, actor: str, outcome: str, duration_s: float | None = None) -> None:
        JOBS.labels(actor, outcome).inc()
        if self.stats is not None:
            self.stats.count(actor, outcome, duration_s)


def _actor(broker: dramatiq.Broker, name: str) -> str:
    """The actor name as a label; names not declared here collapse to ``unknown``
    (a crafted message must not grow the label set)."""
    return name if name in broker.actors else "unknown"
