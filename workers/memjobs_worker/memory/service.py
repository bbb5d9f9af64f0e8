"""Personal memory as every door asks for it: the one path per operation.

The CLI and the HTTP API call these methods, so the same case gets the same
answer everywhere: the switch checked first
(:class:`~memjobs_client.errors.MemoryOff`), a forget decided at once on the
ledger and the owner's queued remembers, recall validated once. The producer
client stays a producer: its forget is queued and decided by the worker.

The parts are given as callables that build them on first use (a process that
never recalls never loads mem0; listing sources needs no Redis).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from memjobs_client.client import ForgetOutcome
from memjobs_client.contracts import ACTOR_FORGET, ForgetSource, SourceRules
from memjobs_client.errors import InvalidPayload, MemoryOff
from memjobs_client.payloads import build_payload, owner_key_of
from memjobs_client.sensitive import ensure_not_sensitive
from memjobs_client.validation import text_problem
from memjobs_worker.memory.intake import ExtractionScheduler
from memjobs_worker.memory.pipeline import MemoryPipeline, RecallHit, mark_forgotten
from memjobs_worker.memory.store.base import SourceRecord, StateStore

#: Memories one recall returns at most.
MAX_RECALL = 50
#: Characters of a recall query at most.
MAX_QUERY_CHARS = 2000

#: What a door's forget decides at once (see :meth:`PersonalMemory.decide_forget`).
ForgetVerdict = Literal["forgotten", "already_forgotten", "not_found"]


@dataclass(kw_only=True, eq=False)
class PersonalMemory:
    """Forget, recall and the owner's reads, behind the personal-memory switch.

    Parameters:
        enabled: ``False`` when ``NOVA_AUDIO_AGENT_MEMORY_PROVIDER=off``: every
            operation but the ledger listing raises :class:`MemoryOff`.
        store: the ledger.
        scheduler: schedules the relearning of sources that shared a forgotten memory.
        pipeline: recall and the memories (mem0).
        remember_queued: whether a remember of this owner (its key) naming this
            source id is queued and not yet in the ledger (a forget may overtake
            its own owner's remember, never another owner's): one read of the
            owner's queued-remember count (:mod:`~memjobs_worker.memory.queued`),
            never a scan of the queue.
        enqueue: sends (actor, payload): the purge of a forgotten source.
        rules: the source rules forget requests are validated under.
        clock: now, for the forget's time (UTC).
    """

    enabled: bool
    store: Callable[[], StateStore]
    scheduler: Callable[[], ExtractionScheduler]
    pipeline: Callable[[], MemoryPipeline]
    remember_queued: Callable[[str, str], bool]
    enqueue: Callable[[str, dict[str, Any]], None]
    rules: SourceRules | None = None
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    def ensure_on(self) -> None:
        """Raises:
        MemoryOff: personal memory is switched off.
        """
        if not self.enabled:
            raise MemoryOff()

    def forget(self, owner_id: str, source_id: str) -> ForgetOutcome:
        """Forget the owner's source at once (recall stops returning its memories
        before this returns), then queue the deletion of every memory derived
        from it: the one forget of every door (the CLI, the HTTP API).

        ``not_found`` (nothing queued) for a source the owner never sent;
        another owner's source with this id is never touched. A forget that
        overtakes the owner's own remember, still queued, is ``forgotten``: the
        remember, when it runs, finds the source forgotten.

        Raises:
            MemoryOff: personal memory is switched off.
            InvalidPayload: missing owner or malformed source id.
            BackendUnavailable: Redis or the ledger did not answer.
        """
        self.ensure_on()
        payload = build_payload(ForgetSource, rules=self.rules, owner_key=owner_key_of(owner_id), source_id=source_id)
        checked = str(payload["source_id"])
        verdict = self.decide_forget(str(payload["owner_key"]), checked)
        if verdict == "not_found":
            return ForgetOutcome(checked, verdict, None)
        self.enqueue(ACTOR_FORGET, payload)
        return ForgetOutcome(checked, verdict, "queued")

    def decide_forget(self, owner_key: str, source_id: str) -> ForgetVerdict:
        """The ledger half of a forget, decided at once; a bounded number of
        reads whatever the backlog (two of the ledger's rows, one Redis key).

        Returns:
            ``forgotten``: the owner's source is forgotten now; or it is not in the
            ledger yet but a remember of it is queued (the forget overtook its
            remember), and a forgotten marker makes that remember find it forgotten.
            ``already_forgotten``: it was forgotten before (nothing changes).
            ``not_found``: the owner has no such source and no remember of theirs
            naming it is queued (another owner's source with this id included,
            queued or not): nothing changes and nothing is written.

        Raises:
            MemoryOff: personal memory is switched off.
        """
        self.ensure_on()
        store = self.store()
        state = self._state(store, owner_key, source_id)
        if state == "forgotten":
            return "already_forgotten"
        if state is None and not self.remember_queued(owner_key, source_id):
            # Its remember may have been taken into the ledger (and its count
            # settled) between the two looks: the ledger is written first, so
            # a second look finds it.
            state = self._state(store, owner_key, source_id)
            if state is None:
                return "not_found"
            if state == "forgotten":
                return "already_forgotten"
        # A remember taken in after these looks is settled by the ledger's own
        # lock: the forget then forgets its row, or its marker makes the
        # remember (sent before this forget) find the source forgotten.
        mark_forgotten(store, self.scheduler(), owner_key, source_id, sent_at=self.clock())
        return "forgotten"

    def was_sent(self, owner_key: str, source_id: str) -> bool:
        """Whether the owner sent this source: it is in the owner's ledger (any
        state), or a remember of it is queued. The ledger is looked at again
        after the count, since a remember is written there before its count is
        settled. What the ``forget_source`` job asks before it writes anything:
        a producer's queued forget of a source never sent leaves no trace.

        Raises:
            MemoryOff: personal memory is switched off.
        """
        self.ensure_on()
        store = self.store()
        return (
            self._state(store, owner_key, source_id) is not None
            or self.remember_queued(owner_key, source_id)
            or self._state(store, owner_key, source_id) is not None
        )

    def recall(self, owner_key: str, query: str, limit: int) -> list[RecallHit]:
        """The owner's learned memories closest to ``query`` (only those whose
        sources are all learned), at most ``limit`` (1 to :data:`MAX_RECALL`).

        The query passes the credential check of every ingest path (as a
        knowledge search's does) before anything is embedded: a key said in a
        recall is refused and never reaches the embedding service.

        Raises:
            MemoryOff: personal memory is switched off.
            InvalidPayload: a blank or over-long query, a limit out of range.
            SensitiveContent: the query looks like a credential.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RECALL:
            raise InvalidPayload(f"limit: must be between 1 and {MAX_RECALL}")
        if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY_CHARS:
            raise InvalidPayload(f"query: must be non-blank text of at most {MAX_QUERY_CHARS} characters")
        problem = text_problem(query)
        if problem is not None:
            raise InvalidPayload(f"query: {problem}")
        ensure_not_sensitive(text=query, field="query")
        self.ensure_on()
        return self.pipeline().recall(owner_key, query, limit)

    def memories(self, owner_key: str) -> list[RecallHit]:
        """Every learned memory of the owner with its sources.

        Raises:
            MemoryOff: personal memory is switched off.
        """
        self.ensure_on()
        return self.pipeline().memories(owner_key)

    def sources(self, owner_key: str) -> list[SourceRecord]:
        """The owner's ledger: every source with its state.

        The ledger outlives the switch: sources stored before memory was switched
        off are still listed (and can still be read back by their owner).
        """
        return self.store().list_sources(owner_key)

    @staticmethod
    def _state(store: StateStore, owner_key: str, source_id: str) -> str | None:
        return store.source_state(owner_key, source_id)
