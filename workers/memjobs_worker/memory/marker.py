"""The owner's "extraction queued" marker let go when its extraction is dead-lettered.

The marker (the scheduler's debounce flag, :class:`~memjobs_worker.memory.intake.ExtractionScheduler`)
is set again before a failed run lets its lease go, since that run is normally
retried. When Dramatiq's retries give up instead (the message goes to the
dead-letter queue, or a permanent error aborts it), nothing is queued for the
owner any more: the marker is cleared, so the owner's next source, or the
sweeper, schedules a new extraction at once rather than after the marker's TTL.
"""

from __future__ import annotations

from collections.abc import Callable

import dramatiq
from dramatiq.broker import MessageProxy

from memjobs_client.contracts import ACTOR_EXTRACT
from memjobs_client.errors import BackendUnavailable
from memjobs_worker.memory.intake import ExtractionScheduler
from memjobs_worker.observability.message import JobMiddleware, message_owner


class ClearMarkerOnDeadLetter(JobMiddleware):
    """Clear the owner's marker when an ``extract_facts`` message ends failed.

    Add it before Retries in the broker's list: "after" hooks run in reverse, so
    Retries has decided (``message.failed``) when this one looks.

    Parameters:
        scheduler: returns the scheduler (built on first use).
    """

    def __init__(self, scheduler: Callable[[], ExtractionScheduler]) -> None:
        self.scheduler = scheduler

    def job_processed(self, broker: dramatiq.Broker, message: MessageProxy, exception: BaseException | None) -> None:
        if exception is None or message.actor_name != ACTOR_EXTRACT or not message.failed:
            return
        owner_key = message_owner(message)
        if owner_key is not None:
            try:
                self.scheduler().clear(owner_key)
            except BackendUnavailable:
                pass  # it expires by itself (MEMJOBS_EXTRACT_MARKER_TTL_MS)
