"""Job outcomes as metrics and one structured log line per job.

Actors say how a job ended by recording an outcome on the message
(``workers.actors.report``: ``created``, ``duplicate``, ``skipped_busy``, …) or
by raising; this middleware turns that into
``memjobs_jobs_total{actor, outcome}``, a duration histogram and a log line
that carries the actor, the outcome and the reason — never payload text.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import dramatiq
from dramatiq.broker import MessageProxy
from dramatiq.middleware import Middleware

from producers.errors import MemjobsError, PermanentError
from workers.metrics import JOB_SECONDS, JOBS

log = logging.getLogger("memjobs.jobs")

#: The message option in which an actor leaves its outcome for this middleware.
OUTCOME_OPTION = "_memjobs_outcome"


class ObserveJobs(Middleware):
    """Times every job and records how it ended."""

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        message.options["_memjobs_started"] = time.perf_counter()

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: MessageProxy,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        started = message.options.pop("_memjobs_started", None)
        recorded = message.options.pop(OUTCOME_OPTION, None)
        actor = message.actor_name if message.actor_name in broker.actors else "unknown"
        if started is not None:
            JOB_SECONDS.labels(actor).observe(time.perf_counter() - started)
        if exception is None:
            outcome = recorded if isinstance(recorded, str) else "succeeded"
            JOBS.labels(actor, outcome).inc()
            log.info("job done", extra={"actor": actor, "outcome": outcome,
                                        "message_id": message.message_id})
            return
        reason = exception.reason if isinstance(exception, MemjobsError) else type(exception).__name__
        if isinstance(exception, PermanentError):
            outcome = reason if reason in ("invalid_payload", "memory_off") else "dead_lettered"
        else:
            outcome = "failed"  # retried, or dead-lettered once retries run out
        JOBS.labels(actor, outcome).inc()
        log.warning("job failed", extra={"actor": actor, "outcome": outcome, "reason": reason,
                                         "message_id": message.message_id,
                                         "retries": message.options.get("retries", 0)})

    def after_skip_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        JOBS.labels(message.actor_name if message.actor_name in broker.actors else "unknown",
                    "skipped").inc()
