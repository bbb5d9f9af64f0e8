"""The state-store seam: what the pipeline needs from the ledger.

The production implementation is :class:`memjobs_worker.memory.store.sql.SqlStateStore` on
PostgreSQL; the same class serves the embedded default and multi-host. Its twin,
:class:`memjobs_worker.memory.store.stub.InMemoryStateStore`, keeps the ledger in
process memory for tests; ``tests/memory/test_store_contract.py`` holds both to this seam.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from memjobs_client.contracts import RememberSource

SourceState = Literal["pending", "learned", "failed", "forgotten"]
#: Every state, in the order counts are shown. ``failed``: the model's replies
#: for the source's batch were malformed (the reason is on the source); final,
#: like ``learned``, until the source is remembered again.
SOURCE_STATES: tuple[SourceState, ...] = ("pending", "learned", "forgotten", "failed")


@dataclass(frozen=True)
class SourceRecord:
    source_id: str
    owner_key: str
    state: SourceState
    kind: str
    session_id: str | None
    text: str | None
    created_at: datetime
    updated_at: datetime
    learned_at: datetime | None
    #: Why the source is ``failed`` (e.g. ``model_output_invalid: the reply is
    #: not JSON (after 2 attempts)``); None in every other state. Never user text.
    reason: str | None = None


def pending_values(payload: RememberSource, now: datetime) -> dict[str, Any]:
    """The fields a remembered ``payload`` (re)sets on its source: pending from ``now``, its text."""
    return {
        "state": "pending",
        "kind": payload.kind,
        "session_id": payload.session_id,
        "text": payload.text,
        "updated_at": now,
        "learned_at": None,
        "reason": None,
    }


def forgotten_marker(owner_key: str, source_id: str, now: datetime) -> SourceRecord:
    """What a forget that overtook its remember leaves: the source forgotten, with no text,
    so that the remember arriving later does not store it (see :meth:`StateStore.forget`)."""
    return SourceRecord(
        source_id=source_id,
        owner_key=owner_key,
        state="forgotten",
        kind="utterance",
        session_id=None,
        text=None,
        created_at=now,
        updated_at=now,
        learned_at=None,
    )


@dataclass(frozen=True)
class Attempt:
    """One fenced extraction over a batch of an owner's pending sources."""

    attempt_id: str
    owner_key: str
    token: int
    sources: tuple[SourceRecord, ...]
    #: More of the owner's sources were pending when the batch was taken (past its
    #: size or its bytes): the run takes another batch at once.
    more: bool = False


@dataclass(frozen=True)
class Produced:
    """A memory an extraction created, and the sources it came from."""

    memory_id: str
    source_ids: tuple[str, ...]


@dataclass(frozen=True)
class CommitResult:
    learned: list[str] = field(default_factory=list)
    #: Memories to delete: they derive from a source forgotten meanwhile.
    discarded: list[str] = field(default_factory=list)
    #: Sources of the batch still pending (to learn again without the forgotten one).
    still_pending: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ForgetResult:
    found: bool
    #: Memories to delete from the engine (also recorded as tombstones).
    memory_ids: list[str] = field(default_factory=list)
    #: Surviving sources that shared a deleted memory: back to pending.
    relearn: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PendingWindow:
    """An owner's pending sources, as extraction's micro-batching sees them."""

    count: int
    #: Milliseconds since the longest-waiting pending source became pending.
    oldest_age_ms: int
    #: Milliseconds since the most recent one did (the owner's quiet time).
    newest_age_ms: int
    #: Milliseconds since the newest of the owner's sources learned lately
    #: (within the ``lookback_ms`` asked for) first came; None: none. The gap
    #: before the pending ones, so that an owner's pace shows from its second
    #: source on, even when one source is pending.
    previous_age_ms: int | None = None


AddOutcome = Literal["created", "duplicate", "revived", "forgotten"]


class StateStore(ABC):
    """The ledger of sources, provenance, fencing tokens and extraction attempts."""

    @abstractmethod
    def add_source(self, payload: RememberSource, *, sent_at: datetime) -> AddOutcome:
        """Write a source as pending; the same (owner, content) is stored once.

        A forgotten source comes back (``revived``) only for a request sent after
        it was forgotten. A failed source comes back for any request: remembering
        it again is how a user asks for another try (its reason is cleared).
        """

    def add_new_sources(self, requests: Sequence[tuple[RememberSource, datetime]]) -> list[bool]:
        """Write each (payload, sent at) whose source the ledger does not hold
        yet as pending, all at once (a store may do it in one statement);
        whether each was written (:meth:`add_source` answers for the others:
        duplicates, forgotten or failed sources). A request repeated within
        ``requests`` is written once, for its first place. This store writes
        none: :meth:`add_source` answers for each.

        Raises:
            BackendUnavailable: the store did not answer (nothing is written).
        """
        return [False] * len(requests)

    @abstractmethod
    def list_sources(self, owner_key: str) -> list[SourceRecord]: ...

    def source_state(self, owner_key: str, source_id: str) -> SourceState | None:
        """The state of the owner's source with this id; None when the owner has
        none (another owner's source with the same id included). A store may
        read the one row instead of the owner's whole ledger."""
        return next((r.state for r in self.list_sources(owner_key) if r.source_id == source_id), None)

    @abstractmethod
    def counts_by_state(self) -> dict[str, int]: ...

    @abstractmethod
    def oldest_pending_at(self) -> datetime | None:
        """When the longest-waiting pending source was last touched (None: none pending)."""

    @abstractmethod
    def pending_window(self, owner_key: str, *, lookback_ms: int = 0) -> PendingWindow:
        """How many of the owner's sources are pending, and since when (store
        clock); with ``lookback_ms``, also when the newest source learned in
        the last ``lookback_ms`` came (:attr:`PendingWindow.previous_age_ms`)."""

    @abstractmethod
    def owners_pending_since(self, before: datetime) -> list[str]:
        """Owners with a source pending since before ``before``."""

    @abstractmethod
    def newest_token(self, owner_key: str) -> int:
        """The newest fencing token accepted for the owner (0: none yet).

        Lock acquisition floors the Redis counter at it, so tokens never go
        backwards when Redis loses its counter.
        """

    @abstractmethod
    def open_attempts(self, owner_key: str) -> list[str]:
        """Attempts left open by a crashed holder: their memories are orphans."""

    def owed(self, owner_key: str) -> tuple[list[str], list[str]]:
        """What a new holder owes before it starts: the attempts left open
        (:meth:`open_attempts`) and the memories whose deletion is owed
        (:meth:`tombstones`). A store may read both at once."""
        return self.open_attempts(owner_key), self.tombstones(owner_key)

    @abstractmethod
    def close_abandoned(self, owner_key: str, token: int, attempt_ids: Sequence[str]) -> None:
        """Record ``token`` as the owner's newest (even with no attempt to close),
        then mark the attempts abandoned.

        Raises:
            StaleFencingToken: a newer holder has been seen.
        """

    @abstractmethod
    def begin_attempt(
        self, owner_key: str, token: int, batch_size: int, deep_batch_size: int = 0, batch_bytes: int = 0
    ) -> Attempt | None:
        """Claim up to ``batch_size`` pending sources under ``token``, oldest first;
        None when none. Up to ``deep_batch_size`` instead when the owner has two
        batches' worth (``2 * batch_size``) pending or more (a backlog: fewer,
        larger calls); 0, or no more than ``batch_size``: never. With
        ``batch_bytes`` (> 0), the batch ends before the source that would take
        its texts' UTF-8 bytes past it; its first source goes whatever its size.

        Raises:
            StaleFencingToken: a newer holder has been seen for this owner.
        """

    @abstractmethod
    def commit_attempt(self, attempt: Attempt, produced: Sequence[Produced]) -> CommitResult:
        """Re-read the batch's states and commit provenance and ``learned``.

        Raises:
            StaleFencingToken: a newer holder has been seen; nothing is written.
        """

    @abstractmethod
    def abort_attempt(self, attempt: Attempt) -> None: ...

    @abstractmethod
    def fail_attempt(self, attempt: Attempt, reason: str) -> list[str]:
        """Close the attempt (``aborted``) and mark its sources still pending
        ``failed`` with ``reason``; returns their ids. Sources forgotten
        meanwhile stay forgotten.

        Raises:
            StaleFencingToken: a newer holder has been seen; nothing is written.
        """

    @abstractmethod
    def prune_attempts(self, started_before: datetime) -> int:
        """Delete the ended attempts (committed, aborted, abandoned) started
        before ``started_before``; how many. Open ones stay: the next holder
        undoes them. Only recovery reads attempts, and it reads open ones."""

    @abstractmethod
    def attempt_events(self, owner_key: str) -> list[tuple[str, int, int | None, str]]:
        """(attempt id, started seq, ended seq, state) in start order: the event log.

        Sequence numbers are shared by starts and ends, so the log orders them."""

    @abstractmethod
    def forget(self, owner_key: str, source_id: str, *, sent_at: datetime) -> ForgetResult:
        """Forget the owner's source in one transaction: its state ``forgotten``
        and its text cleared, the memories it produced owed a deletion
        (tombstones, returned in ``memory_ids``), and the surviving sources that
        shared one of them returned in ``relearn``, back to pending.

        A source the ledger does not hold yet (the forget overtook its remember)
        gets a forgotten marker, the owner's own row, which that remember finds
        (``found`` False); another owner's source with this id is another row and
        is never touched. ``sent_at``: when the forget was sent, kept on the row."""

    @abstractmethod
    def tombstones(self, owner_key: str) -> list[str]: ...

    @abstractmethod
    def clear_tombstones(self, memory_ids: Sequence[str]) -> None: ...

    @abstractmethod
    def learned_provenance(self, owner_key: str, memory_ids: Sequence[str] | None = None) -> dict[str, list[str]]:
        """memory id → its sources, for memories whose sources are all learned
        (only among ``memory_ids`` when given)."""

    @abstractmethod
    def ping(self) -> None:
        """Raise BackendUnavailable unless the store answers."""

    @abstractmethod
    def close(self) -> None: ...
