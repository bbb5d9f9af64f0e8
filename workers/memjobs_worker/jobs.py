"""What every actor shares: parsing its one payload, reporting its outcome, its options.

Every actor takes exactly one positional argument, the payload dict. A message
that does not fit its contract (crafted directly into Redis, an old schema
version, wrong types) raises :class:`InvalidPayload`, which the actors declare
in ``throws``: it goes to the dead-letter queue at once, without retries.

Sensitive content is the exception to "permanent errors are dead-lettered": a
dead-letter queue would keep the secret in Redis, so such a message is refused,
counted and acknowledged (:mod:`memjobs_worker.refusals`), and its text is
stored nowhere. ``parse`` finds it, for every actor, in every text field, with
the same rules and words as the producer.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import dramatiq
from dramatiq.middleware import CurrentMessage

from memjobs_client import contracts
from memjobs_client.errors import InvalidPayload, PermanentError
from memjobs_client.validation import validate
from memjobs_worker.observability.observe import OUTCOME_OPTION
from memjobs_worker.settings import Settings

P = TypeVar("P", bound=contracts._Payload)
Actors = dict[str, dramatiq.Actor[Any, Any]]


def parse(model: type[P], args: tuple[Any, ...], kwargs: dict[str, Any],
          rules: contracts.SourceRules | None = None) -> P:
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


def declare(broker: dramatiq.Broker, settings: Settings,
            table: list[tuple[str, Callable[..., None], dict[str, Any]]]) -> Actors:
    """Register ``(actor name, function, extra options)`` on ``broker`` with the
    retry policy the settings give, each on its contract's queue."""
    common: dict[str, Any] = {
        "broker": broker,
        "max_retries": settings.max_retries,
        "min_backoff": settings.min_backoff_ms,
        "max_backoff": settings.max_backoff_ms,
        "throws": (PermanentError,),
    }
    return {
        name: dramatiq.actor(  # type: ignore[call-overload]
            fn, actor_name=name, queue_name=contracts.QUEUE_OF[name], **common, **extra
        )
        for name, fn, extra in table
    }
