"""What the job middlewares share: the owner a message is for, and Dramatiq's hook of a processed job said once."""

from __future__ import annotations

from typing import Any

import dramatiq
from dramatiq.broker import MessageProxy
from dramatiq.middleware import Middleware


def message_owner(message: MessageProxy) -> str | None:
    """The ``owner_key`` of the message's payload (its one argument); None when there is none."""
    payload = message.args[0] if len(message.args) == 1 else None
    owner = payload.get("owner_key") if isinstance(payload, dict) else None
    return owner if isinstance(owner, str) and owner else None


class JobMiddleware(Middleware):
    """A Dramatiq middleware told of each processed job by :meth:`job_processed`, with
    what the job raised (Dramatiq's ``after_process_message``, its result left out)."""

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: MessageProxy,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        self.job_processed(broker, message, exception)

    def job_processed(self, broker: dramatiq.Broker, message: MessageProxy, exception: BaseException | None) -> None:
        """The job of ``message`` ran on this worker thread; ``exception``: what it raised
        (None: it succeeded). The default does nothing."""


class OnJobEnd(JobMiddleware):
    """A middleware that does the same however a job ends: processed (done or failed) or skipped."""

    def job_ended(self, message: MessageProxy) -> None:
        """The job of ``message`` has ended on this worker thread."""
        raise NotImplementedError

    def job_processed(self, broker: dramatiq.Broker, message: MessageProxy, exception: BaseException | None) -> None:
        self.job_ended(message)

    def after_skip_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        self.job_ended(message)
