"""What several job middlewares read of a message, and the one hook of a job's end."""

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


class OnJobEnd(Middleware):
    """A middleware that does the same however a job ends: processed (done or failed) or skipped."""

    def job_ended(self, message: MessageProxy) -> None:
        """The job of ``message`` has ended on this worker thread."""
        raise NotImplementedError

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: MessageProxy,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        self.job_ended(message)

    def after_skip_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        self.job_ended(message)
