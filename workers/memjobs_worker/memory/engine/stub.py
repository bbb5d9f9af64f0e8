"""Memories in process memory: the memory engine's twin for tests.

Like dramatiq's ``StubBroker``, it does not pretend to be mem0: it keeps each
owner's memories in a dict, makes them the way mem0 does in the two modes
memjobs uses, and records every call so tests can see what a model would have
been sent.

- Without an ``extractor`` (mem0's ``infer=False``), each source with text
  becomes one memory, verbatim, derived from that source alone.
- With one (mem0's ``infer=True``), the batch's texts go to the extractor in one
  call and each fact it returns becomes a memory derived from the whole batch.
- Search is deterministic: cosine similarity of the offline embedder's lexical
  vectors, results under ``min_score`` dropped, best first, ties in creation
  order. mem0's engine also fuses a keyword ranking into its recall
  (:mod:`~memjobs_worker.memory.engine.fused_search`), so the contract holds
  what is found and in which order for clear cases, not the exact scores.

``tests/memory/test_engine_contract.py`` holds this twin and :class:`Mem0Engine` to the
same contract. Faults are injected with :meth:`InMemoryEngine.fail_next` and
races with :attr:`InMemoryEngine.before_extract`.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memjobs_worker.memory.engine.base import MemoryEngine, MemoryHit
from memjobs_worker.memory.engine.offline_embedder import HashingEmbedder
from memjobs_worker.memory.store.base import Produced, SourceRecord

#: The batch's texts in, the facts a model would extract from them out.
Extractor = Callable[[Sequence[str]], Sequence[str]]
#: Called with (owner key, batch) as an extraction starts, before anything is made.
ExtractHook = Callable[[str, Sequence[SourceRecord]], object]


@dataclass(frozen=True)
class EngineCall:
    """One call the engine received.

    ``args`` per method: extract (attempt id, the batch's texts), delete (memory
    ids), delete_attempt (attempt id), search (query, limit), list ().
    """

    method: str
    owner_key: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class _Memory:
    memory_id: str
    owner_key: str
    text: str
    attempt_id: str
    vector: tuple[float, ...]


def _no_hook(owner_key: str, batch: Sequence[SourceRecord]) -> None:
    return None


class InMemoryEngine(MemoryEngine):
    """Per-owner memories in a dict, thread-safe.

    Parameters:
        extractor: the stand-in for the model; None stores sources verbatim.
        embedder: scores search results (the offline embedder by default).
        min_score: search results scoring below this are dropped (as mem0's threshold).
    """

    def __init__(
        self, *, extractor: Extractor | None = None, embedder: HashingEmbedder | None = None, min_score: float = 0.1
    ) -> None:
        self.extractor = extractor
        self.infers = extractor is not None
        self.embedder = embedder or HashingEmbedder()
        self.min_score = min_score
        #: Every call received, in order.
        self.calls: list[EngineCall] = []
        #: Runs at the start of each extraction (e.g. to forget a source mid-flight).
        self.before_extract: ExtractHook = _no_hook
        self._memories: dict[str, _Memory] = {}
        self._faults: dict[str, list[BaseException]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.RLock()

    def fail_next(self, method: str, error: BaseException) -> None:
        """Make the next call of ``method`` raise ``error`` (after it is recorded)."""
        with self._lock:
            self._faults.setdefault(method, []).append(error)

    def extractions(self) -> list[tuple[str, ...]]:
        """The texts of each extraction that had any, in order (with an extractor:
        what a model would have been sent, one call each)."""
        with self._lock:
            return [c.args[1] for c in self.calls if c.method == "extract" and c.args[1]]

    def model_calls(self) -> int:
        """How many calls a model would have received (none without an extractor)."""
        return len(self.extractions()) if self.infers else 0

    # -- the seam --------------------------------------------------------------

    def extract(self, owner_key: str, attempt_id: str, batch: Sequence[SourceRecord]) -> list[Produced]:
        texts = [(s.source_id, s.text) for s in batch if s.text]
        self._record("extract", owner_key, attempt_id, tuple(text for _, text in texts))
        self.before_extract(owner_key, batch)
        if not texts:
            return []
        if self.extractor is not None:
            facts = list(self.extractor([text for _, text in texts]))
            batch_ids = tuple(sid for sid, _ in texts)
            return [Produced(self._add(owner_key, attempt_id, fact), batch_ids) for fact in facts]
        return [Produced(self._add(owner_key, attempt_id, text), (sid,)) for sid, text in texts]

    def delete(self, owner_key: str, memory_ids: Sequence[str]) -> None:
        self._record("delete", owner_key, tuple(memory_ids))
        with self._lock:
            for memory_id in memory_ids:
                self._memories.pop(memory_id, None)

    def delete_attempt(self, owner_key: str, attempt_id: str) -> int:
        self._record("delete_attempt", owner_key, attempt_id)
        with self._lock:
            doomed = [
                m.memory_id for m in self._memories.values() if m.owner_key == owner_key and m.attempt_id == attempt_id
            ]
            for memory_id in doomed:
                del self._memories[memory_id]
        return len(doomed)

    def restore(self, owner_key: str, texts: Sequence[str]) -> list[str]:
        self._record("restore", owner_key, tuple(texts))
        return [self._add(owner_key, "restored", text) for text in texts]

    def search(self, owner_key: str, query: str, limit: int) -> list[MemoryHit]:
        self._record("search", owner_key, query, limit)
        wanted = self.embedder.embed(query)
        with self._lock:
            scored = [
                (sum(a * b for a, b in zip(wanted, m.vector, strict=True)), m)
                for m in self._memories.values()
                if m.owner_key == owner_key
            ]
        kept = [(score, m) for score, m in scored if score >= self.min_score]
        kept.sort(key=lambda pair: -pair[0])  # stable: ties stay in creation order
        return [MemoryHit(m.memory_id, m.text, score) for score, m in kept[:limit]]

    def list(self, owner_key: str) -> list[MemoryHit]:
        self._record("list", owner_key)
        with self._lock:
            return [MemoryHit(m.memory_id, m.text) for m in self._memories.values() if m.owner_key == owner_key]

    def close(self) -> None:
        """Nothing to release."""

    # -- helpers -----------------------------------------------------------------

    def _record(self, method: str, owner_key: str, *args: Any) -> None:
        with self._lock:
            self.calls.append(EngineCall(method, owner_key, args))
            faults = self._faults.get(method)
            error = faults.pop(0) if faults else None
        if error is not None:
            raise error

    def _add(self, owner_key: str, attempt_id: str, text: str) -> str:
        vector = tuple(self.embedder.embed(text))
        with self._lock:
            memory_id = f"mem_{next(self._ids):06d}"
            self._memories[memory_id] = _Memory(memory_id, owner_key, text, attempt_id, vector)
        return memory_id
