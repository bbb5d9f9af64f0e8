"""The actors: validate the message against its contract, then call the pipeline.

Every actor takes exactly one positional argument, the payload dict. A message
that does not fit its contract (crafted directly into Redis, an old schema
version, wrong types) raises :class:`InvalidPayload`, which the actors declare
in ``throws``: it goes to the dead-letter queue at once, without retries.

Sensitive content is the exception to "permanent errors are dead-lettered": a
dead-letter queue would keep the secret in Redis, so such a message is refused,
counted and acknowledged, and its text is stored nowhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import dramatiq
from dramatiq.middleware import CurrentMessage
from pydantic import ValidationError

from memjobs_client import contracts
from memjobs_client.errors import (
    InvalidPayload,
    PermanentError,
    SensitiveContent,
    StaleFencingToken,
    TransientError,
)
from memjobs_worker.knowledge.reindex import reindex
from memjobs_worker.lease import LeaseLock
from memjobs_worker.observability.metrics import lock_hook
from memjobs_worker.observability.observe import OUTCOME_OPTION
from memjobs_worker.runtime import Runtime
from memjobs_worker.sessions import run_consolidation, run_digest
from memjobs_worker.sessions.jobs import settle
from memjobs_worker.settings import Settings

log = logging.getLogger(__name__)
P = TypeVar("P", bound=contracts._Payload)


def parse(model: type[P], args: tuple[Any, ...], kwargs: dict[str, Any]) -> P:
    """The message's one payload, validated.

    Raises:
        InvalidPayload: anything but one dict that fits ``model``.
    """
    if kwargs or len(args) != 1 or not isinstance(args[0], dict):
        raise InvalidPayload(f"{model.__name__}: expected one payload object")
    try:
        return model.model_validate(args[0])
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in e["loc"]) or "payload"
                         for e in exc.errors(include_input=False)})
        raise InvalidPayload(f"{model.__name__}: invalid field(s) {', '.join(fields)}") from None


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

    def remember_source(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.RememberSource, args, kwargs)
        size = len(payload.text.encode("utf-8"))
        if size > settings.max_text_bytes:
            # The producer checks this too, but a crafted message never met it.
            raise InvalidPayload(f"RememberSource: text is {size} bytes, over {settings.max_text_bytes}")
        try:
            report(runtime.pipeline.remember(payload, sent_at=sent_at()))
        except SensitiveContent as exc:
            log.warning("source refused", extra={"reason": exc.reason})
            report("refused_sensitive")

    def extract_facts(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.ExtractFacts, args, kwargs)
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
        payload = parse(contracts.ForgetSource, args, kwargs)
        found = runtime.pipeline.forget(payload, sent_at=sent_at())
        report("forgotten" if found else "forgotten_unknown")

    def consolidate_session(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.ConsolidateSession, args, kwargs)
        model = runtime.chat("consolidate")
        if not settings.consolidation_enabled or model is None:
            report("disabled")  # switched off since it was enqueued
            return
        lease = timedelta(milliseconds=settings.lease_ms)
        report(settle(broker, lease, run_consolidation(
            runtime.sessions, payload, lease=lease, model=model, service=runtime.memory_docs,
            audit=runtime.audit, max_patches=settings.max_patches_per_session,
            max_patch_chars=settings.max_patch_chars)))

    def digest_session(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.DigestSession, args, kwargs)
        model = runtime.chat("digest")
        if not settings.digest_enabled or model is None:
            report("disabled")  # switched off since it was enqueued
            return
        lease = timedelta(milliseconds=settings.lease_ms)
        report(settle(broker, lease, run_digest(runtime.sessions, model, payload, lease=lease)))

    def record_task(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.RecordTask, args, kwargs)
        runtime.sessions.record_task(payload.owner_key, payload.task_id, payload.goal, payload.status)
        report("recorded")

    def reindex_knowledge(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.ReindexKnowledge, args, kwargs)
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
