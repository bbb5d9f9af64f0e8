"""The producer client a gateway embeds: validate, then enqueue.

Importing this module pulls in Dramatiq's Redis broker and pydantic only, never
mem0, an LLM client or SQLAlchemy. Every check that can be made without the
database is made here, before anything reaches Redis: a refused call enqueues
nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import redis
from dramatiq import Message
from dramatiq.brokers.redis import RedisBroker
from pydantic import ValidationError

from memjobs_client import contracts
from memjobs_client.connect import Durability, SentinelAddresses, redis_client
from memjobs_client.contracts import (
    ACTOR_CONSOLIDATE,
    ACTOR_DIGEST,
    ACTOR_EXTRACT,
    ACTOR_FORGET,
    ACTOR_RECORD_TASK,
    ACTOR_REINDEX,
    ACTOR_REMEMBER,
    DEFAULT_MAX_TEXT_BYTES,
    DEFAULT_MAX_TRANSCRIPT_BYTES,
    ConsolidateSession,
    DigestSession,
    ExtractFacts,
    ForgetSource,
    RecordTask,
    ReindexKnowledge,
    RememberSource,
    SourceKind,
)
from memjobs_client.errors import BackendUnavailable, InvalidPayload, MemoryOff
from memjobs_client.sensitive import ensure_not_sensitive


def build_payload(model: type[contracts._Payload], **fields: Any) -> dict[str, Any]:
    """Validate ``fields`` against a contract and return the message payload.

    Raises:
        InvalidPayload: with pydantic's field-by-field explanation.
    """
    try:
        return model(**fields).model_dump(mode="json")
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'payload'}: {err['msg']}"
            for err in exc.errors(include_input=False)
        )
        raise InvalidPayload(f"invalid {model.__name__}: {problems}") from None


#: How long "this session has ended" is remembered (a repeated end is a no-op).
_SESSION_MARKER_TTL_S = 7 * 24 * 3600


class MemjobsClient:
    """Enqueue memjobs work from a gateway.

    Parameters:
        redis_url: the Redis that carries the queues.
        max_text_bytes: refuse a source whose UTF-8 text is longer.
        memory_enabled: ``False`` when ``NOVA_AUDIO_AGENT_MEMORY_PROVIDER=off``;
            every personal-memory call is then refused with ``memory_off``.
        consolidation_enabled: enqueue ``consolidate_session`` at session end
            (automatic consolidation on and a model configured).
        digest_enabled: enqueue ``digest_session`` (``QWEN_AUDIO_SESSION_DIGEST=on``).
        max_transcript_bytes: refuse a transcript whose turns are longer in all.
        broker: an existing broker to send through (workers pass theirs).
        timeout_s: bound on one Redis call; during an outage a call raises
            ``BackendUnavailable`` within about twice this, never hangs.
        sentinels: Redis Sentinel addresses (``"h1:26379,h2:26379"``); the
            master is then found by ``sentinel_master``.
        durability: wait for the write's fsync / replicas before returning.
    """

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
        memory_enabled: bool = True,
        consolidation_enabled: bool = False,
        digest_enabled: bool = False,
        max_transcript_bytes: int = DEFAULT_MAX_TRANSCRIPT_BYTES,
        broker: RedisBroker | None = None,
        timeout_s: float = 5.0,
        sentinels: str | SentinelAddresses | None = None,
        sentinel_master: str = "memjobs",
        durability: Durability | None = None,
    ) -> None:
        if broker is None:
            if redis_url is None:
                raise ValueError("MemjobsClient needs a redis_url or a broker")
            client = redis_client(redis_url, timeout_s=timeout_s, sentinels=sentinels,
                                  sentinel_master=sentinel_master)
            broker = RedisBroker(  # type: ignore[no-untyped-call]
                client=client, namespace=contracts.NAMESPACE, middleware=[]
            )
        self.broker = broker
        self.durability = durability or Durability()
        self.max_text_bytes = max_text_bytes
        self.memory_enabled = memory_enabled
        self.consolidation_enabled = consolidation_enabled
        self.digest_enabled = digest_enabled
        self.max_transcript_bytes = max_transcript_bytes

    def remember(
        self,
        owner_id: str,
        text: str,
        session_id: str | None = None,
        kind: SourceKind = "utterance",
    ) -> str:
        """Queue a source for the owner's ledger and return its source id.

        The id is a function of (owner, content): the same words from the same
        owner always give the same id, and are stored once.

        Raises:
            InvalidPayload: missing owner, empty or oversized text, wrong types.
            SensitiveContent: the text looks like a credential (nothing is queued).
            MemoryOff: personal memory is switched off.
            BackendUnavailable: Redis did not answer.
        """
        self._require_memory()
        key = _owner_key(owner_id)
        if not isinstance(text, str):
            raise InvalidPayload("invalid RememberSource: text: must be a string")
        size = len(text.encode("utf-8"))
        if size > self.max_text_bytes:
            raise InvalidPayload(
                f"invalid RememberSource: text: {size} bytes, over the limit of "
                f"{self.max_text_bytes} bytes"
            )
        ensure_not_sensitive(text=text)
        payload = build_payload(
            RememberSource,
            owner_key=key,
            source_id=contracts.source_id_for(key, text),
            text=text,
            session_id=session_id,
            kind=kind,
        )
        self._send(ACTOR_REMEMBER, payload)
        return str(payload["source_id"])

    def forget(self, owner_id: str, source_id: str) -> None:
        """Queue the deletion of a source and of every memory derived from it.

        Raises:
            InvalidPayload: missing owner or malformed source id.
            MemoryOff: personal memory is switched off.
            BackendUnavailable: Redis did not answer.
        """
        self._require_memory()
        payload = build_payload(ForgetSource, owner_key=_owner_key(owner_id), source_id=source_id)
        self._send(ACTOR_FORGET, payload)

    def end_session(
        self,
        owner_id: str,
        session_id: str,
        transcript: Sequence[Mapping[str, Any]],
        tasks: Sequence[Mapping[str, Any]] = (),
    ) -> list[str]:
        """Queue the session-end work in one call; returns the actors enqueued.

        Consolidation (when enabled), the digest (when enabled) and an
        extraction nudge for the owner. The same (owner, session) ended twice
        enqueues nothing the second time (a Redis marker kept 7 days).

        Raises:
            InvalidPayload: malformed transcript or tasks, or a transcript over
                the size limit.
            BackendUnavailable: Redis did not answer.
        """
        key = _owner_key(owner_id)
        size = sum(len(str(t.get("text", "")).encode("utf-8")) for t in transcript
                   if isinstance(t, Mapping))
        if size > self.max_transcript_bytes:
            raise InvalidPayload(
                f"invalid transcript: {size} bytes, over the limit of {self.max_transcript_bytes} bytes"
            )
        session = {"owner_key": key, "session_id": session_id, "transcript": list(transcript)}
        consolidate = build_payload(ConsolidateSession, **session)
        digest = build_payload(DigestSession, **session, tasks=list(tasks))
        nudge = build_payload(ExtractFacts, owner_key=key, trigger="session_end")
        marker = f"{contracts.NAMESPACE}:session-ended:{key}:{contracts.content_hash(session_id)}"
        try:
            first = self.broker.client.set(marker, "1", nx=True, ex=_SESSION_MARKER_TTL_S)
        except redis.RedisError as exc:
            raise BackendUnavailable(f"Redis did not take the end of session: {exc}") from exc
        if not first:
            return []
        jobs = [(ACTOR_CONSOLIDATE, consolidate, self.consolidation_enabled),
                (ACTOR_DIGEST, digest, self.digest_enabled),
                (ACTOR_EXTRACT, nudge, self.memory_enabled)]
        sent = []
        try:
            for actor, payload, wanted in jobs:
                if wanted:
                    self._send(actor, payload)
                    sent.append(actor)
        except BackendUnavailable:
            # Let the gateway end the session again: the jobs are idempotent per session.
            try:
                self.broker.client.delete(marker)
            except redis.RedisError:
                pass
            raise
        return sent

    def record_task(self, owner_id: str, task_id: str, goal: str, status: str) -> None:
        """Report a task's status to the task ledger (read live by session recall).

        Raises:
            InvalidPayload: missing fields or an unknown status.
            BackendUnavailable: Redis did not answer.
        """
        payload = build_payload(RecordTask, owner_key=_owner_key(owner_id), task_id=task_id,
                                goal=goal, status=status)
        self._send(ACTOR_RECORD_TASK, payload)

    def reindex_knowledge(
        self,
        owner_id: str,
        documents: Sequence[Mapping[str, Any] | str],
        consent: bool,
        *,
        allowed_roots: Sequence[str] = (),
    ) -> int:
        """Queue a re-index of the owner's whole corpus; returns the documents sent.

        A document is ``{"doc_id", "title", "text"}`` or a local path (a string,
        read by the worker, and only under one of ``allowed_roots``). Documents
        of the owner not in ``documents`` are removed from the index.

        Raises:
            InvalidPayload: no consent (reason ``consent_required``), malformed documents.
            BackendUnavailable: Redis did not answer.
        """
        if consent is not True:
            raise InvalidPayload(
                "re-indexing sends the documents' text to the embedding service: it needs the "
                "user's consent (consent=True)", reason="consent_required")
        docs = [{"path": d} if isinstance(d, str) else dict(d) for d in documents]
        payload = build_payload(ReindexKnowledge, owner_key=_owner_key(owner_id), consent=True,
                                documents=docs, allowed_roots=list(allowed_roots))
        self._send(ACTOR_REINDEX, payload)
        return len(docs)

    def send(self, actor_name: str, payload: dict[str, Any], *, delay_ms: int | None = None) -> None:
        """Enqueue an already validated payload for ``actor_name``."""
        self._send(actor_name, payload, delay_ms=delay_ms)

    def close(self) -> None:
        """Close the broker's Redis connections."""
        self.broker.close()

    def _require_memory(self) -> None:
        if not self.memory_enabled:
            raise MemoryOff("personal memory is off (NOVA_AUDIO_AGENT_MEMORY_PROVIDER=off)")

    def _send(self, actor_name: str, payload: dict[str, Any], *, delay_ms: int | None = None) -> None:
        message: Message[Any] = Message(
            queue_name=contracts.QUEUE_OF[actor_name],
            actor_name=actor_name,
            args=(payload,),
            kwargs={},
            options={},
        )
        try:
            self.broker.enqueue(message, delay=delay_ms)
            self.durability.wait(self.broker.client)
        except redis.RedisError as exc:
            raise BackendUnavailable(f"Redis did not take the {actor_name} job: {exc}") from exc


def _owner_key(owner_id: Any) -> str:
    try:
        return contracts.owner_key(owner_id)
    except ValueError:
        raise InvalidPayload("invalid payload: owner_id: must be a non-empty string") from None
