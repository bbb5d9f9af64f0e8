"""The producer client a gateway embeds: validate, then enqueue.

Importing this module pulls in Dramatiq's Redis broker and pydantic only, never
mem0, an LLM client or SQLAlchemy. Every check that can be made without the
database is made here, before anything reaches Redis: a refused call enqueues
nothing.  Every argument is validated against its contract with the source
rules (:class:`~memjobs_client.contracts.SourceRules`), the same validation
the worker repeats; wrong types, ``None`` where a list is expected and text
that is not valid raise :class:`InvalidPayload` with the first few problems,
and validation stays linear in the size of the input.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis
from dramatiq import Message
from dramatiq.brokers.redis import RedisBroker

from memjobs_client import contracts, keys, reindexing
from memjobs_client import queued as queued_remembers
from memjobs_client.connect import Durability, MemoryGuard, SentinelAddresses, redis_client
from memjobs_client.contracts import (
    DEFAULT_MAX_TEXT_BYTES,
    DEFAULT_MAX_TRANSCRIPT_BYTES,
    MAX_TASKS,
    MAX_TURNS,
    ConsolidateSession,
    DigestSession,
    ExtractFacts,
    ForgetSource,
    RecordTask,
    RememberSource,
    SourceKind,
    SourceRules,
)
from memjobs_client.errors import BackendUnavailable, InvalidPayload, KnowledgeOff, MemoryOff, RedisFull
from memjobs_client.payloads import build_payload, corpus_payloads, owner_key_of, redacted
from memjobs_client.redis_seam import as_str, redis_best_effort, redis_errors
from memjobs_client.validation import as_list as _items
from memjobs_client.validation import validate

_ACTOR_NAME = re.compile(r"[a-z_]{1,64}")


#: How long a session's queued end jobs are remembered (a repeated end queues
#: only what was not queued before).
_SESSION_MARKER_TTL_S = 7 * 24 * 3600

#: Adds each of ARGV[2:] to the set KEYS[1] that is not in it yet, returns those,
#: and (re)sets its TTL to ARGV[1] seconds. A string there was written by an older
#: memjobs ("ended", no job named): replaced (the workers run each session's jobs
#: once whatever is queued again).
_CLAIM_SESSION_JOBS = """
if redis.call('TYPE', KEYS[1]).ok ~= 'set' then redis.call('DEL', KEYS[1]) end
local added = {}
for i = 2, #ARGV do
  if redis.call('SADD', KEYS[1], ARGV[i]) == 1 then added[#added + 1] = ARGV[i] end
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return added
"""

#: A forget's answer: decided at once by a worker-side door
#: (:class:`~memjobs_worker.memory.service.PersonalMemory`), or ``queued`` from
#: this client, which has no ledger.
ForgetStatus = Literal["forgotten", "already_forgotten", "not_found", "queued"]


@dataclass(frozen=True)
class ForgetOutcome:
    """The answer to a forget, the same at every door (CLI, HTTP API, a door's
    :class:`~memjobs_worker.memory.service.PersonalMemory`, this client).

    ``status``:
        ``forgotten``: the owner's source is forgotten now (recall no longer returns
        its memories); or its remember is still queued, and will find it forgotten.
        ``already_forgotten``: it was forgotten before.
        ``not_found``: the owner never sent such a source (nothing in the owner's
        ledger, no remember of theirs queued; another owner's source with this id
        included): nothing changed and nothing was queued.
        ``queued``: this client, which has no ledger, queued the forget; the worker
        decides (under this owner only: it never reaches another owner's source).
    ``purge``: ``queued`` when the deletion of the memories derived from it is queued.
    """

    source_id: str
    status: ForgetStatus
    purge: Literal["queued"] | None

    @property
    def found(self) -> bool:
        return self.status != "not_found"


class MemjobsClient:
    """Enqueue memjobs work from a gateway.

    Parameters:
        redis_url: the Redis that carries the queues.
        max_text_bytes: refuse a source whose UTF-8 text is longer.
        memory_enabled: ``False`` when ``NOVA_AUDIO_AGENT_MEMORY_PROVIDER=off``;
            every personal-memory call is then refused with ``memory_off``.
        consolidation_enabled: enqueue ``consolidate_session`` at session end
            (default): the workers decide with their own settings (automatic
            consolidation on and a model configured) and skip it otherwise;
            ``False`` opts this producer out.
        digest_enabled: enqueue ``digest_session`` at session end (default); the
            workers run it when ``QWEN_AUDIO_SESSION_DIGEST=on``; ``False`` opts out.
        max_transcript_bytes: refuse a transcript whose turns are longer in all.
        knowledge_enabled: ``False`` when knowledge is off (``MEMJOBS_KNOWLEDGE``,
            opt-in: off by default on the workers, whose doors pass it); a reindex
            is then refused here and nothing is queued. A reindex this client
            queues while the workers have knowledge off waits unconsumed.
        broker: an existing broker to send through (workers pass theirs).
        timeout_s: bound on one Redis call; during an outage a call raises
            ``BackendUnavailable`` within about twice this, never hangs.
        sentinels: Redis Sentinel addresses (``"h1:26379,h2:26379"``); the
            master is then found by ``sentinel_master``.
        durability: wait for the write's fsync / replicas before returning.
        memory_guard: refuses new jobs (``RedisFull``) while Redis is near its
            ``maxmemory``; by default at 90 % when the client makes its own broker,
            none on a worker's broker (its jobs finish work already queued).
    """

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
        memory_enabled: bool = True,
        consolidation_enabled: bool = True,
        digest_enabled: bool = True,
        max_transcript_bytes: int = DEFAULT_MAX_TRANSCRIPT_BYTES,
        broker: RedisBroker | None = None,
        knowledge_enabled: bool = True,
        timeout_s: float = 5.0,
        sentinels: str | SentinelAddresses | None = None,
        sentinel_master: str = "memjobs",
        durability: Durability | None = None,
        memory_guard: MemoryGuard | None = None,
    ) -> None:
        if broker is None:
            if redis_url is None:
                raise ValueError("MemjobsClient needs a redis_url or a broker")
            memory_guard = memory_guard or MemoryGuard()
            client = redis_client(redis_url, timeout_s=timeout_s, sentinels=sentinels, sentinel_master=sentinel_master)
            broker = RedisBroker(  # type: ignore[no-untyped-call]
                client=client, namespace=keys.NAMESPACE, middleware=[]
            )
        self.broker = broker
        self.durability = durability or Durability()
        self.memory_guard = memory_guard
        self.max_text_bytes = max_text_bytes
        self.memory_enabled = memory_enabled
        self.consolidation_enabled = consolidation_enabled
        self.digest_enabled = digest_enabled
        self.max_transcript_bytes = max_transcript_bytes
        self.knowledge_enabled = knowledge_enabled
        self.rules = SourceRules(max_text_bytes=max_text_bytes, max_transcript_bytes=max_transcript_bytes)

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
        key = owner_key_of(owner_id)
        if not isinstance(text, str):
            raise InvalidPayload(f"text: must be a string, not {type(text).__name__}")
        payload = build_payload(
            RememberSource,
            rules=self.rules,
            owner_key=key,
            source_id=contracts.source_id_for(key, text),
            text=text,
            session_id=session_id,
            kind=kind,
        )
        # Counted as queued before it is enqueued: a forget decides on that count
        # (memjobs_client.queued), never on a scan of the queue.
        self._send(contracts.ACTOR_REMEMBER, payload, queued=(key, str(payload["source_id"])))
        return str(payload["source_id"])

    def forget(self, owner_id: str, source_id: str) -> ForgetOutcome:
        """Queue a forget; the worker decides it (``queued``).

        A producer has no ledger: the worker's ``forget_source`` marks the source
        forgotten (or, when its remember is still queued, leaves a forgotten
        marker that remember honours) and deletes every memory derived from it;
        a source id the owner does not have changes nothing, and another owner's
        source with this id is never touched. To have the forget decided at once
        (``forgotten``, ``already_forgotten``, ``not_found``), go through a door:
        the HTTP API's ``POST /v1/forget`` or ``memjobs forget``.

        Raises:
            InvalidPayload: missing owner or malformed source id.
            MemoryOff: personal memory is switched off.
            BackendUnavailable: Redis did not answer.
        """
        self._require_memory()
        payload = build_payload(ForgetSource, rules=self.rules, owner_key=owner_key_of(owner_id), source_id=source_id)
        self._send(contracts.ACTOR_FORGET, payload)
        return ForgetOutcome(str(payload["source_id"]), "queued", "queued")

    def end_session(
        self,
        owner_id: str,
        session_id: str,
        transcript: Sequence[Mapping[str, Any]],
        tasks: Sequence[Mapping[str, Any]] = (),
        *,
        consolidate: bool | None = None,
        digest: bool | None = None,
    ) -> list[str]:
        """Queue the session-end work in one call; returns the actors this call
        enqueued (``consolidate_session``, ``digest_session``, ``extract_facts``).

        By default consolidation, the digest and an extraction nudge for the
        owner: the workers decide with their own settings whether to run them
        (no model configured, or switched off: skipped, counted as ``no_model``
        or ``switched_off``). ``consolidate=False`` / ``digest=False`` opt this
        call out (``None``: the client's ``consolidation_enabled`` /
        ``digest_enabled``).

        Each job is queued at most once per (owner, session): a Redis set kept 7
        days records which were. Ending the session again queues only what was
        not queued before (a job opted out of, or one Redis refused), so a
        corrected retry completes it; an empty list means all were queued already.

        Secrets said in the session are redacted here, before anything is
        enqueued: in each turn's text and each task's goal (and title) the
        secret becomes ``[REDACTED]`` and the rest is kept, so no password
        said in a conversation reaches Redis, its files or a dead-letter queue.

        Raises:
            InvalidPayload: malformed transcript or tasks, or a transcript over
                the size limit.
            SensitiveContent: the session id carries a credential.
            BackendUnavailable: Redis did not answer.
        """
        key = owner_key_of(owner_id)
        # A secret said in the session is redacted here, before Redis sees it.
        turns = redacted(_items("ConsolidateSession", "transcript", transcript, MAX_TURNS), ("text",))
        task_list = redacted(_items("DigestSession", "tasks", tasks, MAX_TASKS), ("goal", "title"))
        session = {"owner_key": key, "session_id": session_id, "transcript": turns}
        # The owner id too: a host's memory provider maps tenants by the id, not its key.
        consolidation = build_payload(ConsolidateSession, rules=self.rules, **session, owner_id=owner_id)
        digest_job = build_payload(DigestSession, rules=self.rules, **session, tasks=task_list)
        nudge = build_payload(ExtractFacts, owner_key=key, trigger="session_end")
        marker = keys.session_ended(key, contracts.content_hash(session_id))
        jobs = [
            (
                contracts.ACTOR_CONSOLIDATE,
                consolidation,
                self.consolidation_enabled if consolidate is None else consolidate,
            ),
            (contracts.ACTOR_DIGEST, digest_job, self.digest_enabled if digest is None else digest),
            (contracts.ACTOR_EXTRACT, nudge, self.memory_enabled),
        ]
        claimed = self._claim_session_jobs(marker, [actor for actor, _, wanted in jobs if wanted])
        sent: list[str] = []
        for actor, payload, _ in jobs:
            if actor not in claimed:
                continue
            try:
                self._send(actor, payload)
            except BackendUnavailable:
                # Not queued: a retry of the same end queues what is missing (the
                # jobs are idempotent per session on the worker side as well).
                self._release_session_jobs(marker, [a for a in claimed if a not in sent])
                raise
            sent.append(actor)
        return sent

    def _claim_session_jobs(self, marker: str, actors: list[str]) -> list[str]:
        """Record ``actors`` as queued for the session, at once; returns those
        that were not already (concurrent ends: one of them gets each)."""
        if not actors:
            return []
        with _taking("the end of session"):
            added = self.broker.client.eval(_CLAIM_SESSION_JOBS, 1, marker, _SESSION_MARKER_TTL_S, *actors)
        names = {as_str(a) for a in added}
        return [a for a in actors if a in names]

    def _release_session_jobs(self, marker: str, actors: list[str]) -> None:
        if not actors:
            return
        # Redis down: the marker names a job never queued; see end_session
        with redis_best_effort():
            self.broker.client.srem(marker, *actors)

    def record_task(self, owner_id: str, task_id: str, goal: str, status: str) -> None:
        """Report a task's status to the task ledger (read live by session recall).

        A secret in the goal is blanked out (the goal keeps its other words).

        Raises:
            InvalidPayload: missing fields or an unknown status.
            SensitiveContent: the task id carries a credential.
            BackendUnavailable: Redis did not answer.
        """
        payload = build_payload(
            RecordTask, rules=self.rules, owner_key=owner_key_of(owner_id), task_id=task_id, goal=goal, status=status
        )
        self._send(contracts.ACTOR_RECORD_TASK, payload)

    def reindex_knowledge(
        self,
        owner_id: str,
        documents: Sequence[Mapping[str, Any] | str],
        consent: bool,
        *,
        allowed_roots: Sequence[str] = (),
        part_size: int = contracts.MAX_CORPUS_DOCUMENTS,
        on_part: Callable[[int, int, int], None] | None = None,
    ) -> int:
        """Queue a re-index of the owner's whole corpus; returns the documents sent.

        A document is ``{"doc_id", "title", "text"}`` or a local path (a string,
        read by the worker, and only under one of ``allowed_roots`` and the
        worker's own roots). Documents of the owner not in ``documents`` are
        removed from the index. A path whose name is not valid UTF-8 cannot
        travel: it is sent as a refusal (``undecodable_name``), listed with the
        owner's documents like any other refused one.

        More than ``part_size`` documents (at most
        :data:`~memjobs_client.contracts.MAX_CORPUS_DOCUMENTS`) go as several
        messages, the parts of one corpus; ``on_part(index, count, documents)``
        is called after each is queued (a terminal shows progress with it).

        Raises:
            KnowledgeOff: knowledge is off (``MEMJOBS_KNOWLEDGE=off``); nothing is queued.
            InvalidPayload: no consent (reason ``consent_required``), malformed
                documents, more than ``MAX_CORPUS_PARTS`` parts. Nothing is queued.
            SensitiveContent: a document's text, title or id, or a path, carries a
                credential or names a credential file (nothing is queued).
            BackendUnavailable: Redis did not answer (the parts already queued
                stay queued; they remove nothing until every part is in).
        """
        if not self.knowledge_enabled:
            raise KnowledgeOff()
        if consent is not True:
            raise InvalidPayload(
                "re-indexing sends the documents' text to the embedding service: it needs the "
                "user's consent (consent=True)",
                reason="consent_required",
            )
        payloads = corpus_payloads(owner_key_of(owner_id), documents, allowed_roots, part_size, self.rules)
        named = [_named(doc) for p in payloads for doc in p["documents"]]
        # Recorded before the first part can start, so a worker's "indexing" follows it.
        with _taking("reindex_knowledge"):
            reindexing.record_queued(self.broker.client, payloads[0]["owner_key"], named, len(payloads))
        for i, payload in enumerate(payloads, start=1):
            self._send(contracts.ACTOR_REINDEX, payload)
            if on_part is not None:
                on_part(i, len(payloads), len(payload["documents"]))
        return sum(len(p["documents"]) for p in payloads)

    def send(self, actor_name: str, payload: Mapping[str, Any], *, delay_ms: int | None = None) -> None:
        """Enqueue ``payload`` for ``actor_name``, validated against its contract
        like every other call (workers enqueue their follow-up jobs here).

        Raises:
            InvalidPayload: an unknown actor, a bad delay or a payload that does not fit.
            SensitiveContent: a field carries a credential.
            BackendUnavailable: Redis did not answer.
        """
        model = contracts.PAYLOADS.get(actor_name) if isinstance(actor_name, str) else None
        if model is None:
            shown = actor_name if isinstance(actor_name, str) and _ACTOR_NAME.fullmatch(actor_name) else "?"
            raise InvalidPayload(f"actor_name: unknown actor {shown!r}")
        if delay_ms is not None and (not isinstance(delay_ms, int) or isinstance(delay_ms, bool) or delay_ms < 0):
            raise InvalidPayload("delay_ms: must be a whole number of milliseconds, at least 0")
        checked = validate(model, payload, self.rules).model_dump(mode="json")
        queued = (
            (str(checked["owner_key"]), str(checked["source_id"])) if actor_name == contracts.ACTOR_REMEMBER else None
        )  # counted as remember() counts it
        self._send(actor_name, checked, delay_ms=delay_ms, queued=queued)

    def close(self) -> None:
        """Close the broker's Redis connections."""
        self.broker.close()

    def _require_memory(self) -> None:
        if not self.memory_enabled:
            raise MemoryOff()

    def _send(
        self,
        actor_name: str,
        payload: dict[str, Any],
        *,
        delay_ms: int | None = None,
        queued: tuple[str, str] | None = None,
    ) -> None:
        """Enqueue one message; with ``queued`` (owner key, source id), a remember
        recorded as queued first, and taken back if the enqueue fails."""
        message: Message[Any] = Message(
            queue_name=contracts.QUEUE_OF[actor_name],
            actor_name=actor_name,
            args=(payload,),
            kwargs={},
            options={},
        )
        with _taking(f"the {actor_name} job"):
            if self.memory_guard is not None:
                self.memory_guard.check(self.broker.client)
            if queued is not None:
                queued_remembers.record(self.broker.client, *queued)
            try:
                self.broker.enqueue(message, delay=delay_ms)
            except BaseException:
                if queued is not None:
                    queued_remembers.take_back(self.broker.client, *queued)
                raise
            self.durability.wait(self.broker.client)


def _named(doc: Mapping[str, Any]) -> tuple[str, str]:
    """A reindexed document's id and title as ``knowledge list`` shows it."""
    if "path" in doc:
        path = str(doc["path"])
        return contracts.knowledge_path_id(path), path.rstrip("/").rsplit("/", 1)[-1]
    return str(doc.get("doc_id", "")), str(doc.get("title", ""))


def _taking(what: str) -> redis_errors:
    """Redis's refusal of ``what`` as the producer's error: RedisFull when Redis
    is at its ``maxmemory`` (``OOM`` reply), else BackendUnavailable."""

    def refused(exc: redis.RedisError) -> BackendUnavailable:
        if isinstance(exc, redis.OutOfMemoryError):
            return RedisFull(
                f"Redis is full (maxmemory reached) and refused {what}: nothing was queued; "
                "retry once the workers have drained it"
            )
        return BackendUnavailable(f"Redis did not take {what}: {exc}")

    return redis_errors(translate=refused)
