"""The actors: validate the message against its contract, then call the pipeline.

Every actor takes exactly one positional argument, the payload dict. A message
that does not fit its contract (crafted directly into Redis, an old schema
version, wrong types) raises :class:`InvalidPayload`, which the actors declare
in ``throws``: it goes to the dead-letter queue at once, without retries.

Sensitive content is the exception to "permanent errors are dead-lettered": a
dead-letter queue would keep the secret in Redis, so such a message is refused,
counted and acknowledged (:mod:`memjobs_worker.refusals`), and its text is
stored nowhere.  ``parse`` finds it, for every actor, in every text field.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import dramatiq
from dramatiq.middleware import CurrentMessage

from memjobs_client import contracts
from memjobs_client.errors import InvalidPayload, PermanentError, StaleFencingToken, TransientError
from memjobs_client.validation import validate
from memjobs_worker.knowledge.reindex import reindex
from memjobs_worker.lease import LeaseLock
from memjobs_worker.observability.metrics import lock_hook
from memjobs_worker.observability.observe import OUTCOME_OPTION
from memjobs_worker.runtime import Runtime
from memjobs_worker.sessions import run_digest
from memjobs_worker.sessions.consolidation import run_consolidation
from memjobs_worker.settings import Settings

log = logging.getLogger(__name__)
P = TypeVar("P", bound=contracts._Payload)


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


def declare_actors(broker: dramatiq.Broker, runtime: Runtime) -> dict[str, dramatiq.Actor[Any, Any]]:
    """Register memjobs' actors on ``broker``, bound to ``runtime``."""
    settings: Settings = runtime.settings
    rules = settings.source_rules()

    def remember_source(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.RememberSource, args, kwargs, rules)
        report(runtime.pipeline.remember(payload, sent_at=sent_at()))

    def extract_facts(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.ExtractFacts, args, kwargs, rules)
        try:
            done = runtime.pipeline.extract(payload)
        except StaleFencingToken:
            report("stale_commit_refused")  # a newer holder owns the work now
            return
        log.info("extraction", extra={"owner_key": payload.owner_key, "outcome": done.outcome,
                                      "attempts": done.attempts, "learned": done.learned,
                                      "discarded": done.discarded, "recovered": done.recovered})
        report("skipped_busy" if done.outcome == "busy" else "succeeded")

    def forget_source(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.ForgetSource, args, kwargs, rules)
        found = runtime.pipeline.forget(payload, sent_at=sent_at())
        report("forgotten" if found else "forgotten_unknown")

    def consolidate_session(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.ConsolidateSession, args, kwargs, rules)
        model = runtime.chat("consolidate")
        if not settings.consolidation_enabled or model is None:
            report("disabled")  # switched off since it was enqueued
            return
        done = run_consolidation(runtime.sessions, payload, model=model, service=runtime.memory_docs,
                                 audit=runtime.audit, max_patches=settings.max_patches_per_session,
                                 max_patch_chars=settings.max_patch_chars)
        if done is None:
            report("duplicate")
            return
        log.info("consolidation", extra={"owner_key": payload.owner_key, "applied": done.applied,
                                         "refused": done.refused})
        report("succeeded")

    def digest_session(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.DigestSession, args, kwargs, rules)
        model = runtime.chat("digest")
        if not settings.digest_enabled or model is None:
            report("disabled")  # switched off since it was enqueued
            return
        report(run_digest(runtime.sessions, model, payload))

    def record_task(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.RecordTask, args, kwargs, rules)
        runtime.sessions.record_task(payload.owner_key, payload.task_id, payload.goal, payload.status)
        report("recorded")

    def reindex_knowledge(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.ReindexKnowledge, args, kwargs, rules)
        if not settings.knowledge_enabled:
            report("disabled")
            return
        lock = LeaseLock(runtime.redis, "reindex", payload.owner_key, lease_ms=settings.lease_ms,
                         on_event=lock_hook("reindex"))
        if lock.try_acquire() is None:
            # Each message carries a whole corpus: retry it later rather than merge.
            raise TransientError("another reindex of this owner is running", reason="reindex_busy")
        try:
            with lock:
                embedder = runtime.knowledge_embedder
                done = reindex(payload, store=runtime.knowledge,
                               embed=embedder.embed_batch if embedder is not None else None,
                               dims=settings.embedding_dims if embedder is not None else None,
                               settings=settings)
        finally:
            lock.abandon()
        log.info("reindex", extra={"owner_key": payload.owner_key, "indexed": done.indexed,
                                   "unchanged": done.unchanged, "removed": done.removed,
                                   "refused": sorted(done.refused.values()), "chunks": done.chunks,
                                   "embedding_calls": done.embedding_calls})
        report("succeeded")

    common: dict[str, Any] = {
        "broker": broker,
        "max_retries": settings.max_retries,
        "min_backoff": settings.min_backoff_ms,
        "max_backoff": settings.max_backoff_ms,
        "throws": (PermanentError,),
    }
    table: list[tuple[str, Callable[..., None], dict[str, Any]]] = [
        (contracts.ACTOR_REMEMBER, remember_source, {}),
        (contracts.ACTOR_EXTRACT, extract_facts, {"time_limit": 3_600_000}),
        (contracts.ACTOR_FORGET, forget_source, {}),
        (contracts.ACTOR_CONSOLIDATE, consolidate_session, {}),
        (contracts.ACTOR_DIGEST, digest_session, {}),
        (contracts.ACTOR_RECORD_TASK, record_task, {}),
        (contracts.ACTOR_REINDEX, reindex_knowledge, {"time_limit": 3_600_000}),
    ]
    return {
        name: dramatiq.actor(  # type: ignore[call-overload]
            fn, actor_name=name, queue_name=contracts.QUEUE_OF[name], **common, **extra
        )
        for name, fn, extra in table
    }
