"""The session-end jobs as the actors run them: once per (owner, session), whatever
the delivery, with a secret-free payload and a bounded end for bad model output.

Each job:

1. redacts the payload again (:func:`redact_payload`): the producer already did,
   but a message written into Redis by hand must not carry a secret further;
2. claims its run in the state store (:class:`~memjobs_worker.sessions.runs.RunLedger`):
   a run done, failed or held under a live lease ends the delivery as
   ``duplicate`` without a model call. A run held under a live lease may
   belong to a worker that has just died, so :func:`settle` leaves a check-back
   copy of the message, delayed by the lease: it ends as ``duplicate`` once the
   run is done, or takes over the run whose lease ran out;
3. works while a background thread renews the lease, every write fenced by it;
4. ends the run ``done``; or ``failed`` with the reason ``model_output_invalid``
   (the job then ends normally: no Dramatiq retry, no dead letter); or, on a
   transient failure (model down, database away), gives the run back so the
   Dramatiq retry can claim it at once, and re-raises. If that was the last
   try, the message is dead-lettered and
   :class:`~memjobs_worker.sessions.endings.EndRunsOnDeadLetter` ends the run
   ``failed`` with the failure's reason.

A worker that does not do the work (no model, switched off) ends the run
``skipped`` with its reason (:func:`skip`), so every run reaches a final state.

Outcomes (the ``outcome`` label of ``memjobs_jobs_total``): ``succeeded`` /
``stored``, ``duplicate``, ``model_output_invalid``, ``sensitive_document`` (a
memory document holds a secret read whole: nothing was sent), ``stale_commit_refused``,
``no_model`` / ``switched_off``
(the run functions also return ``busy``, which :func:`settle` turns into ``duplicate``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import dramatiq
from dramatiq.middleware import CurrentMessage

from memjobs_client.contracts import QUEUE_OF, ConsolidateSession, DigestSession, TaskRef, Turn
from memjobs_client.errors import MemjobsError, PermanentError, StaleFencingToken
from memjobs_client.sensitive import redact_secrets
from memjobs_worker.model_client import ChatModel
from memjobs_worker.sessions.consolidation import consolidate
from memjobs_worker.sessions.digest import digest_session
from memjobs_worker.sessions.endings import current_letter, remember_claim
from memjobs_worker.sessions.prompting import ModelOutputInvalid
from memjobs_worker.sessions.runs import RunClaim, RunKind, RunLedger
from memjobs_worker.sessions.store import SessionStore

log = logging.getLogger(__name__)
P = TypeVar("P", ConsolidateSession, DigestSession)

#: Lease of a session run when the caller gives none (renewed every third of it).
DEFAULT_LEASE = timedelta(seconds=30)
#: Check-backs one delivery may leave behind while another holds the run (then it stops).
MAX_CHECK_BACKS = 20
_CHECK_BACKS = "_memjobs_session_check_backs"


def redact_payload(payload: P) -> P:
    """The payload with every turn's text and every task goal redacted (markers kept)."""
    turns = tuple(Turn(role=t.role, text=redact_secrets(t.text), ts=t.ts) for t in payload.transcript)
    update: dict[str, Any] = {"transcript": turns}
    if isinstance(payload, DigestSession):
        update["tasks"] = tuple(TaskRef(task_id=t.task_id, goal=redact_secrets(t.goal)) for t in payload.tasks)
    return payload.model_copy(update=update)


def run_consolidation(
    store: SessionStore, payload: ConsolidateSession, *, lease: timedelta = DEFAULT_LEASE, **kwargs: Any
) -> str:
    """The consolidation job; ``kwargs`` go to :func:`~memjobs_worker.sessions.consolidation.consolidate`.
    Returns the job's outcome."""
    payload = redact_payload(payload)

    def work(claim: RunClaim, held: Callable[[], bool]) -> str:
        done = consolidate(payload, still_held=lambda: held() and store.runs.holds(claim), **kwargs)
        if done.skipped is not None:
            store.runs.fail(claim, done.skipped)  # not run again: the document must be cleared first
            return done.skipped
        store.runs.finish(claim)
        # The key's first characters (as dead letters show it): never the whole key,
        # which an owner's erasure must leave in no log (docs/data-lifecycle.md).
        log.info(
            "consolidation", extra={"owner": payload.owner_key[:12], "applied": done.applied, "refused": done.refused}
        )
        return "succeeded"

    return _once(store.runs, payload.owner_key, payload.session_id, "consolidate", lease, work)


def run_digest(
    store: SessionStore,
    model: ChatModel,
    payload: DigestSession,
    now: datetime | None = None,
    *,
    lease: timedelta = DEFAULT_LEASE,
) -> str:
    """The digest job: returns ``stored``, ``duplicate``, ``model_output_invalid`` or
    ``stale_commit_refused``. ``now`` dates the digest (default: the store's clock)."""
    payload = redact_payload(payload)

    def work(claim: RunClaim, held: Callable[[], bool]) -> str:
        digest = digest_session(model, payload)
        store.save_digest(
            payload.owner_key, payload.session_id, digest.topic, digest.gist, digest.task_goals, now=now, claim=claim
        )
        return "stored"

    return _once(store.runs, payload.owner_key, payload.session_id, "digest", lease, work)


def settle(broker: dramatiq.Broker, lease: timedelta, outcome: str) -> str:
    """The outcome to report for a delivery. ``busy`` (the run is held under a live
    lease) becomes ``duplicate``, and a copy of the message is enqueued to check
    back after the lease, so a run whose holder died is still taken over."""
    if outcome != "busy":
        return outcome
    message = CurrentMessage.get_current_message()
    checks = int(message.options.get(_CHECK_BACKS, 0)) if message is not None else MAX_CHECK_BACKS
    if message is not None and checks < MAX_CHECK_BACKS:
        again: dramatiq.Message[Any] = dramatiq.Message(
            queue_name=QUEUE_OF[message.actor_name],
            actor_name=message.actor_name,
            args=message.args,
            kwargs=message.kwargs,
            options={_CHECK_BACKS: checks + 1},
        )
        broker.enqueue(again, delay=int(lease.total_seconds() * 1000) + 100)
    return "duplicate"


def skip(runs: RunLedger, owner_key: str, session_id: str, kind: RunKind, reason: str) -> str:
    """A worker that does not do this work (``reason``: ``no_model``, ``switched_off``)
    ends the run ``skipped`` with its reason, and the outcome is ``reason``; a run that
    has ended is a ``duplicate``, one held under a live lease ``busy`` (see :func:`settle`)."""
    if runs.skip(owner_key, session_id, kind, reason, letter=current_letter()):
        return reason
    return "busy" if runs.state(owner_key, session_id, kind) == "running" else "duplicate"


def _once(
    runs: RunLedger,
    owner_key: str,
    session_id: str,
    kind: RunKind,
    lease: timedelta,
    work: Callable[[RunClaim, Callable[[], bool]], str],
) -> str:
    claim = runs.claim(owner_key, session_id, kind, lease, letter=current_letter())
    if claim is None:
        return "busy" if runs.state(owner_key, session_id, kind) == "running" else "duplicate"
    remember_claim(claim)  # if the message is dead-lettered, its run ends (sessions.endings)
    try:
        with runs.keep(claim, lease) as held:
            return work(claim, held)
    except ModelOutputInvalid as exc:
        runs.fail(claim, exc.reason)
        log.warning("session run failed", extra={"kind": kind, "reason": exc.reason, "attempt": claim.attempt})
        return exc.reason
    except StaleFencingToken:
        return "stale_commit_refused"  # a newer holder owns the run now
    except PermanentError as exc:
        failed = exc.reason
        _quietly(lambda: runs.fail(claim, failed))
        raise
    except BaseException as exc:
        reason = exc.reason if isinstance(exc, MemjobsError) else type(exc).__name__
        _quietly(lambda: runs.release(claim, reason))
        raise


def _quietly(step: Callable[[], Any]) -> None:
    """Run a bookkeeping step after a failure; its own failure must not hide the first.
    (If it fails, the lease simply runs out and the retry takes the run over.)"""
    try:
        step()
    except MemjobsError:
        log.warning("could not record the end of a session run; its lease will expire")
