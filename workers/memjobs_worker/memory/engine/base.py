"""The memory-engine seam: extract memories from sources, delete, search.

mem0 is the production engine (:mod:`memjobs_worker.memory.engine.mem0_engine`); its
twin for tests is :class:`memjobs_worker.memory.engine.stub.InMemoryEngine`, and
``tests/memory/test_engine_contract.py`` holds both to this seam. An engine
never decides what is learned: it returns what it created, and the ledger
decides (and may order the deletion of what it created).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from memjobs_worker.memory.store.base import Produced, SourceRecord


@dataclass(frozen=True)
class MemoryHit:
    memory_id: str
    text: str
    score: float | None = None


class MemoryEngine(ABC):
    """Where memories live and how they are made."""

    #: True when extraction asks a model (one call per batch; provenance per batch).
    infers: bool = False

    @abstractmethod
    def extract(self, owner_key: str, attempt_id: str, batch: Sequence[SourceRecord]) -> list[Produced]:
        """Create memories from ``batch``, tagged with ``attempt_id``.

        Raises:
            ModelUnavailable: the model or embedding service failed (transient).
            ModelOutputInvalid: the model answered, but not with facts in the
                agreed shape, even when asked again (permanent for this batch:
                the pipeline records its sources as ``failed``).
            BackendUnavailable: the vector store did not answer.
        """

    @abstractmethod
    def delete(self, owner_key: str, memory_ids: Sequence[str]) -> None:
        """Delete memories; ids already gone are ignored."""

    @abstractmethod
    def delete_attempt(self, owner_key: str, attempt_id: str) -> int:
        """Delete whatever a crashed attempt created; returns how many."""

    @abstractmethod
    def restore(self, owner_key: str, texts: Sequence[str]) -> list[str]:
        """Store ``texts`` as memories as they are, without a model (an import of
        an owner's export); returns their ids, one per text, in order.

        Raises:
            ModelUnavailable: the embedding service failed (transient).
            BackendUnavailable: the vector store did not answer.
        """

    @abstractmethod
    def search(self, owner_key: str, query: str, limit: int) -> list[MemoryHit]: ...

    @abstractmethod
    def list(self, owner_key: str) -> list[MemoryHit]: ...

    def warm(self) -> None:
        """Load now what extraction needs and would otherwise load on its first
        call (a worker's warm-up; a process that only searches never calls it)."""
        return None

    @abstractmethod
    def close(self) -> None: ...
