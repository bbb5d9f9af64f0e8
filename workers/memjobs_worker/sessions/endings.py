"""A session run ends when its message is dead-lettered: :class:`EndRunsOnDeadLetter`.

What: a Dramatiq middleware. When a message of ``consolidate_session`` or
``digest_session`` goes to the dead letters — its retries spent, a permanent
error, a payload the worker refuses as invalid — its run ends ``failed`` with
the failure's reason (the one :mod:`~memjobs_worker.observability.failures`
recorded: ``version_conflict``, ``invalid_payload`` …) and names the letter, so
that replaying it (``memjobs deadletters retry``) may run it again
(:meth:`~memjobs_worker.sessions.runs.RunLedger.end_dead_lettered`).

Why here: only the Retries middleware knows whether a failure is the last, and
it says so by marking the message failed, which the worker then nacks: the
``after_nack`` hook is the one place where "dead-lettered" is a fact, not a
guess. Before this, the job gave its run back on every failure and a
dead-lettered run stayed ``running`` for good.

Which run: the one the message last claimed (the job leaves the claim's key and
holder token in the message option :data:`RUN_OPTION`), else the run named by
the payload's ``owner_key`` and ``session_id`` when both are well formed (a
payload refused before any claim). A session id that looks like a credential
names no run: it is stored nowhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import dramatiq
from dramatiq.broker import MessageProxy
from dramatiq.middleware import CurrentMessage, Middleware
from pydantic import BaseModel, ConfigDict, Field

from memjobs_client import contracts
from memjobs_client.errors import MemjobsError
from memjobs_client.validation import SafeText
from memjobs_worker.observability.failures import failure_record
from memjobs_worker.sessions.runs import RunClaim, RunKind, RunLedger

log = logging.getLogger(__name__)

#: The message option where a job leaves its last claim: key and holder token.
RUN_OPTION = "_memjobs_session_run"
#: The run kind of each session-end actor.
KIND_OF_ACTOR: dict[str, RunKind] = {contracts.ACTOR_CONSOLIDATE: "consolidate", contracts.ACTOR_DIGEST: "digest"}


class _RunKey(BaseModel):
    """The two fields of a session payload that name its run, checked as the contract does."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    owner_key: str = Field(pattern=r"^[0-9a-f]{64}$")
    session_id: SafeText = Field(min_length=1, max_length=128)


def remember_claim(claim: RunClaim) -> None:
    """Leave ``claim`` on the current message, for :class:`EndRunsOnDeadLetter`."""
    message = CurrentMessage.get_current_message()
    if message is not None:
        message.options[RUN_OPTION] = {
            "owner_key": claim.owner_key,
            "session_id": claim.session_id,
            "holder": claim.holder,
        }


def current_letter() -> str | None:
    """The current message's id: the name its dead letter, and a replay of it, keep."""
    message = CurrentMessage.get_current_message()
    return message.message_id if message is not None else None


class EndRunsOnDeadLetter(Middleware):
    """Ends the run of every dead-lettered session-end message (see the module).

    Parameters:
        runs: returns the run ledger (built on first use, as the actors' parts are).
    """

    def __init__(self, runs: Callable[[], RunLedger]) -> None:
        self.runs = runs

    def after_nack(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        kind = KIND_OF_ACTOR.get(message.actor_name)
        if kind is None:
            return
        named = _run_of(message)
        if named is None:
            return
        (owner_key, session_id), holder = named
        reason = str(failure_record(message.options).get("reason") or "dead_lettered")
        try:
            ended = self.runs().end_dead_lettered(
                owner_key, session_id, kind, reason, letter=message.message_id, holder=holder
            )
        except MemjobsError:
            # The run keeps running, lease lapsed: the sweep ends it as abandoned.
            log.warning(
                "could not end a dead-lettered session run",
                extra={"kind": kind, "reason": reason, "message_id": message.message_id},
            )
            return
        log.info(
            "session run ended by its dead letter"
            if ended
            else "dead-lettered session message: its run had already ended or is held",
            extra={"kind": kind, "reason": reason, "message_id": message.message_id},
        )


def _run_of(message: MessageProxy) -> tuple[tuple[str, str], str | None] | None:
    """((owner key, session id), holder or None) of the message's run, or None."""
    claimed = message.options.get(RUN_OPTION)
    if isinstance(claimed, dict) and isinstance(claimed.get("holder"), str):
        try:
            key = _RunKey.model_validate(claimed)
        except Exception:  # noqa: BLE001 - a hand-made option names no run
            return None
        return (key.owner_key, key.session_id), claimed["holder"]
    args = message.args
    if len(args) != 1 or not isinstance(args[0], dict):
        return None
    try:
        key = _RunKey.model_validate(args[0])
    except Exception:  # noqa: BLE001 - malformed, or a session id that looks like a secret
        return None
    return (key.owner_key, key.session_id), None
