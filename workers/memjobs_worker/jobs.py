"""What every actor shares: parsing its one payload, reporting its outcome, its options.

Every actor takes exactly one positional argument, the payload dict. A message
that does not fit its contract (crafted directly into Redis, a schema version
that is no version, wrong types) raises :class:`InvalidPayload`, which the
actors declare in ``throws``: it goes to the dead-letter queue at once, without
retries. Older schema versions are read; a newer one never reaches an actor of
this worker: it is left for a newer worker (:class:`memjobs_worker.broker.DeferNewerSchema`).

Sensitive content is the exception to "permanent errors are dead-lettered": a
dead-letter queue would keep the secret in Redis, so such a message is refused,
counted and acknowledged (:mod:`memjobs_worker.refusals`), and its text is
stored nowhere. ``parse`` finds it, for every actor, in every text field, with
the same rules and words as the producer.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import dramatiq
from dramatiq.broker import MessageProxy
from dramatiq.common import compute_backoff
from dramatiq.middleware import CurrentMessage, Retries

from memjobs_client import contracts
from memjobs_client.errors import InvalidPayload, PermanentError
from memjobs_client.validation import validate
from memjobs_worker.db.outage import is_outage
from memjobs_worker.observability.message import JobMiddleware
from memjobs_worker.observability.observe import OUTCOME_OPTION
from memjobs_worker.settings import WorkerSettings

P = TypeVar("P", bound=contracts._Payload)
Actors = dict[str, dramatiq.Actor[Any, Any]]

#: Message options of the outage policy (:class:`OutageRetries`): when (epoch ms)
#: the message first failed on an outage, and how often it has since.
OUTAGE_SINCE_OPTION = "_memjobs_outage_since"
OUTAGE_RETRIES_OPTION = "_memjobs_outage_retries"


def parse(
    model: type[P], args: tuple[Any, ...], kwargs: dict[str, Any], rules: contracts.SourceRules | None = None
) -> P:
    """The message's one payload, validated as the producer validates it
    (:func:`memjobs_client.validation.validate`, under the same source rules).

    Raises:
        SensitiveContent: a field carries a credential (the message is then
            acknowledged, not dead-lettered: see :mod:`memjobs_worker.refusals`).
        InvalidPayload: anything else but one dict that fits ``model``.
    """
    if kwargs or len(args) != 1 or not isinstance(args[0], dict):
        raise InvalidPayload(f"invalid {model.__name__}: expected one payload object")
    return validate(model, args[0], rules)


def sent_at() -> datetime:
    """When the producer created the current message (its clock, in UTC)."""
    message = CurrentMessage.get_current_message()
    millis = message.message_timestamp if message is not None else None
    return datetime.fromtimestamp(millis / 1000, UTC) if millis else datetime.now(UTC)


def report(outcome: str) -> None:
    """Tell the ObserveJobs middleware how the current job ended (e.g. ``duplicate``)."""
    message = CurrentMessage.get_current_message()
    if message is not None:
        message.options[OUTCOME_OPTION] = outcome


def declare(
    broker: dramatiq.Broker, workers: WorkerSettings, table: list[tuple[str, Callable[..., None], dict[str, Any]]]
) -> Actors:
    """Register ``(actor name, function, extra options)`` on ``broker`` with the
    retry policy the settings give, each on its contract's queue."""
    common: dict[str, Any] = {
        "broker": broker,
        "max_retries": workers.max_retries,
        "min_backoff": workers.min_backoff_ms,
        "max_backoff": workers.max_backoff_ms,
        "throws": (PermanentError,),
    }
    return {
        name: dramatiq.actor(  # type: ignore[call-overload]
            fn, actor_name=name, queue_name=contracts.QUEUE_OF[name], **common, **extra
        )
        for name, fn, extra in table
    }


class OutageRetries(JobMiddleware, Retries):
    """Dramatiq's retries, with outages retried on a time budget instead of a count.

    A job that fails because Redis or the database is unreachable, or the
    database refuses to write (read-only: a failover in progress), is not at
    fault, and a count of retries says nothing about how long an outage lasts.
    Such a failure (:func:`~memjobs_worker.db.outage.is_outage`) is retried
    without counting against ``max_retries``, at most ``max_backoff_ms`` apart
    (exponential from the actor's ``min_backoff``), for ``budget_ms`` since the
    message's first such failure; past the budget, the ordinary policy applies
    (counted retries, then the dead letters). So an outage of minutes
    dead-letters nothing, and once the backend answers every waiting job runs
    within ``max_backoff_ms``. The message stays in Redis all along (enqueued
    again, delayed, before the failed delivery is acknowledged).

    Any other failure clears the message's outage record: the next outage gets
    a whole budget again.
    """

    def __init__(self, *, budget_ms: int, max_backoff_ms: int) -> None:
        super().__init__()
        self.budget_ms = budget_ms
        self.outage_max_backoff_ms = max_backoff_ms

    def job_processed(self, broker: dramatiq.Broker, message: MessageProxy, exception: BaseException | None) -> None:
        if exception is None:
            return
        actor = broker.get_actor(message.actor_name)
        throws = message.options.get("throws") or actor.options.get("throws")
        outage = is_outage(exception) and not (throws and isinstance(exception, throws))
        now_ms = int(time.time() * 1000)
        since = int(message.options.get(OUTAGE_SINCE_OPTION) or now_ms) if outage else None
        if since is None or now_ms - since >= self.budget_ms:
            message.options.pop(OUTAGE_SINCE_OPTION, None)
            message.options.pop(OUTAGE_RETRIES_OPTION, None)
            # Retries' own hook (JobMiddleware's comes first in the class's order).
            Retries.after_process_message(self, broker, message, exception=exception)  # type: ignore[no-untyped-call]
            return
        attempts = int(message.options.get(OUTAGE_RETRIES_OPTION) or 0)
        message.options[OUTAGE_SINCE_OPTION] = since
        message.options[OUTAGE_RETRIES_OPTION] = attempts + 1
        message.options["traceback"] = traceback.format_exc(limit=30)
        message.options["requeue_timestamp"] = now_ms
        cap = self.outage_max_backoff_ms
        floor = min(int(message.options.get("min_backoff", actor.options.get("min_backoff", cap))), cap)
        _, delay = compute_backoff(attempts, factor=floor, max_backoff=cap)
        broker.enqueue(message, delay=delay)  # type: ignore[arg-type]  # as Retries does


#: The logger of Dramatiq's worker threads, which logs every failed attempt.
DRAMATIQ_WORKER_LOGGER = "dramatiq.worker.WorkerThread"


class OutageLogs(logging.Filter):
    """Dramatiq logs every failed attempt at ERROR with its traceback: during an
    outage of minutes that is a traceback per job every few seconds, burying
    the one line that matters. An attempt that failed on an outage
    (:func:`~memjobs_worker.db.outage.is_outage`) becomes one WARNING line
    naming the error's class, without the traceback; other failures are left
    as they are."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and record.levelno >= logging.ERROR and is_outage(exc):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg = "Failed to process message %s: a backend is unreachable (%s); retried while it is"
            record.args = (
                record.args[0] if isinstance(record.args, tuple) and record.args else "?",
                type(exc).__name__,
            )
            record.exc_info, record.exc_text = None, None
        return True


def use_outage_retries(broker: dramatiq.Broker, workers: WorkerSettings) -> None:
    """Put :class:`OutageRetries` in the place of the broker's default Retries,
    and :class:`OutageLogs` on Dramatiq's worker logger (once)."""
    worker_log = logging.getLogger(DRAMATIQ_WORKER_LOGGER)
    if not any(isinstance(f, OutageLogs) for f in worker_log.filters):
        worker_log.addFilter(OutageLogs())
    for i, middleware in enumerate(broker.middleware):
        if type(middleware) is Retries:
            broker.middleware[i] = OutageRetries(
                budget_ms=workers.outage_retry_budget_ms, max_backoff_ms=workers.outage_max_backoff_ms
            )
            return
    raise RuntimeError("the broker has no Retries middleware to replace")
