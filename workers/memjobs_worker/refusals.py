"""Refused as sensitive: acknowledged, counted, never kept in the dead-letter queue.

What: :class:`RefuseSensitive` is a Dramatiq middleware.  When an actor raises
:class:`~memjobs_client.errors.SensitiveContent` (``parse`` found a credential
in a field of a message written into Redis past the producer), the message is
marked done instead of failed, so the broker acknowledges and deletes it; the
refusal is counted (``memjobs_refused_total{reason="sensitive_content"}``) and
the job's outcome is ``refused_sensitive``.

Why: every other permanent error goes to the dead-letter queue for a person to
look at, but a dead-letter queue would keep the secret in Redis.  The log line
names the rule, never the text.

Order: after Retries (which has marked the message failed) and before
ObserveJobs (which records the outcome) in the "after" hooks, i.e. between
them in the middleware list: ``broker.add_middleware(RefuseSensitive(), before=Retries)``
once ObserveJobs is in place.
"""

from __future__ import annotations

import logging

import dramatiq
from dramatiq.broker import MessageProxy

from memjobs_client.errors import SensitiveContent
from memjobs_worker.observability.message import JobMiddleware
from memjobs_worker.observability.metrics import REFUSED
from memjobs_worker.observability.observe import OUTCOME_OPTION

log = logging.getLogger(__name__)

#: The outcome a refused message is recorded with.
REFUSED_SENSITIVE = "refused_sensitive"


class RefuseSensitive(JobMiddleware):
    """Acknowledge (not dead-letter) a message refused as sensitive."""

    def job_processed(self, broker: dramatiq.Broker, message: MessageProxy, exception: BaseException | None) -> None:
        if not isinstance(exception, SensitiveContent):
            return
        message.failed = False  # acknowledged and deleted: the secret leaves Redis
        message.options[OUTCOME_OPTION] = REFUSED_SENSITIVE
        REFUSED.labels(exception.reason).inc()
        log.warning(
            "message refused: it carries what looks like a credential",
            extra={
                "actor": message.actor_name if message.actor_name in broker.actors else "unknown",
                "reason": exception.reason,
                "message_id": message.message_id,
            },
        )
