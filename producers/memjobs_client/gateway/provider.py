"""The seeds' ``MemoryProvider`` for a Python gateway, backed by memjobs' HTTP API.

What: :class:`MemjobsMemoryProvider`, the same object as the TypeScript
client's (``@memjobs/client/memory-provider``):

- ``describe()`` -> ``{protocolVersion, key, label}``;
- ``list(owner_id, options)``: synchronous and bounded, from a local cache. An
  owner not in the cache answers ``[]`` (the seed's empty provider) and its
  fetch starts on a background thread; an entry older than ``refresh_ms``
  answers what it holds and is revalidated in the background with a
  conditional GET (``If-None-Match``: ``304`` and no body while nothing
  changed). At most ``max_owners`` owners, the least recently listed dropped first;
- ``apply(owner_id, changes, context)``: the memory tool's edits (``append``;
  ``replace`` of a unique ``old_text``, an empty ``new_text`` deletes), one
  turn all or none, through ``POST /v1/memory/edits``; the cache takes the
  written documents at once. ``context`` (source, session, turn, trace) is the
  gateway's, never the model's. Refusals raise :class:`ApiError` (``reason``:
  ``not_found``, ``ambiguous``, ``sensitive_content``, ``forbidden_document``, …);
- ``health()`` -> ``{ok, detail}``; ``close()``.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from memjobs_client.gateway.http import ApiError, GatewayApi

#: The MemoryProvider protocol this provider implements (the seeds' constant).
MEMORY_PROVIDER_PROTOCOL_VERSION = 2
#: The same constant under the name of memjobs' worker side.
PROTOCOL_VERSION = MEMORY_PROVIDER_PROTOCOL_VERSION
#: The documents a provider lists and writes, in snapshot order.
MEMORY_DOCUMENTS: tuple[str, ...] = ("USER.md", "MEMORY.md")
SCOPE_OF = {"USER.md": "user", "MEMORY.md": "memory"}
DOC_OF_SCOPE = {scope: doc for doc, scope in SCOPE_OF.items()}
MAX_EDITS = 20


@dataclass
class _Entry:
    docs: list[dict[str, Any]] | None = None
    etag: str | None = None
    fetched_at: float = 0.0
    retry_at: float = 0.0
    generation: int = 0
    inflight: Future[list[dict[str, Any]]] | None = field(default=None, repr=False)


def valid_document(d: object) -> dict[str, Any] | None:
    """A server document, checked: a known name, its scope, text, a non-negative version."""
    if not isinstance(d, Mapping) or d.get("doc") not in SCOPE_OF:
        return None
    content, version = d.get("content"), d.get("version")
    if not isinstance(content, str) or not isinstance(version, int) or isinstance(version, bool) or version < 0:
        return None
    return {"doc": d["doc"], "scope": SCOPE_OF[d["doc"]], "content": content, "version": version}


def to_edit(change: object, index: int) -> dict[str, Any]:
    """One change for ``/v1/memory/edits`` (camelCase accepted).

    Raises:
        ApiError: ``validation``: not an append or a replace with its fields.
    """

    def bad(what: str) -> ApiError:
        return ApiError(f"changes[{index}]: {what}", reason="validation")

    if not isinstance(change, Mapping):
        raise bad("must be a mapping")
    doc = change.get("doc") or DOC_OF_SCOPE.get(str(change.get("scope")))
    if not isinstance(doc, str):
        raise bad("doc (USER.md or MEMORY.md) is required")
    if change.get("op") == "append":
        if not isinstance(change.get("text"), str):
            raise bad("append needs text")
        return {"op": "append", "doc": doc, "text": change["text"]}
    if change.get("op") == "replace":
        old = change.get("old_text", change.get("oldText"))
        new = change.get("new_text", change.get("newText")) or ""
        if not isinstance(old, str) or not isinstance(new, str):
            raise bad("replace needs old_text (and new_text)")
        return {"op": "replace", "doc": doc, "old_text": old, "new_text": new}
    raise bad("op must be append or replace (whole-document writes are not accepted: say what changes)")


def merge_newest(held: Sequence[dict[str, Any]], fresh: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Both lists' documents, the higher version of each, in snapshot order."""
    best: dict[str, dict[str, Any]] = {}
    for d in [*held, *fresh]:
        if d["doc"] not in best or d["version"] > best[d["doc"]]["version"]:
            best[d["doc"]] = d
    return [best[name] for name in MEMORY_DOCUMENTS if name in best]


class MemjobsMemoryProvider:
    """A gateway's MemoryProvider on memjobs (see the module docstring).

    Parameters:
        api: the HTTP API (:class:`GatewayApi`: base URL, token, timeouts).
        key, label: what :meth:`describe` answers.
        max_owners: owners cached at most.
        refresh_ms: age past which :meth:`list` revalidates an owner.
        max_doc_chars: a listed document's content, at most, in characters.
        source: ``context.source`` when the gateway names none.
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        api: GatewayApi,
        *,
        key: str = "memjobs",
        label: str = "memjobs (USER.md, MEMORY.md)",
        max_owners: int = 1000,
        refresh_ms: int = 2000,
        max_doc_chars: int = 8000,
        source: str = "gateway",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_owners < 1:
            raise ValueError("max_owners must be positive")
        self.api = api
        self.key, self.label = key, label
        self.max_owners = max_owners
        self.refresh_s = refresh_ms / 1000
        self.max_doc_chars = max_doc_chars
        self.source = source
        self.clock = clock
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="memjobs-provider")
        self._closed = False
        self._last_error: ApiError | None = None

    def describe(self) -> dict[str, Any]:
        return {"protocolVersion": MEMORY_PROVIDER_PROTOCOL_VERSION, "key": self.key, "label": self.label}

    def owners(self) -> builtins.list[str]:
        """The owners cached, least recently listed first."""
        with self._lock:
            return list(self._cache)

    def list(self, owner_id: str, options: Mapping[str, Any] | None = None) -> builtins.list[dict[str, Any]]:
        """The owner's documents from the cache, at once; ``[]`` for an owner not fetched
        yet (its fetch starts). ``options``: ``maxDocs`` / ``max_docs``, ``maxChars`` / ``max_chars``."""
        if self._closed or not isinstance(owner_id, str) or not owner_id:
            return []
        opts = options or {}
        with self._lock:
            entry = self._entry(owner_id)
            now = self.clock()
            due = entry.docs is None or now - entry.fetched_at >= self.refresh_s
            start = due and entry.inflight is None and now >= entry.retry_at
            docs = list(entry.docs or [])
        if start:
            self._start(owner_id)
        max_docs = _bound(opts.get("maxDocs", opts.get("max_docs")), len(MEMORY_DOCUMENTS))
        max_chars = min(_bound(opts.get("maxChars", opts.get("max_chars")), self.max_doc_chars), self.max_doc_chars)
        return [{**d, "content": d["content"][:max_chars]} for d in docs[:max_docs]]

    def refresh(self, owner_id: str, timeout_s: float | None = None) -> builtins.list[dict[str, Any]]:
        """Fetch now (a conditional GET when cached) and wait; what :meth:`list` will answer.

        Raises:
            ApiError: the fetch failed (also recorded for :meth:`health`).
        """
        return self._start(owner_id).result(timeout_s)

    def apply(
        self, owner_id: str, changes: Sequence[Mapping[str, Any]], context: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The memory tool's edits of one turn, all or none: ``{changed, documents, edits}``.

        Raises:
            ApiError: a refusal (its ``reason``), a malformed change (``validation``), closed.
        """
        if self._closed:
            raise ApiError("the provider is closed", reason="closed")
        if not isinstance(owner_id, str) or not owner_id:
            raise ApiError("owner_id must be a non-empty string", reason="validation")
        if isinstance(changes, str | bytes | Mapping) or not 1 <= len(changes) <= MAX_EDITS:
            raise ApiError(f"changes must be 1 to {MAX_EDITS} edits", reason="validation")
        edits = [to_edit(c, i) for i, c in enumerate(changes)]
        ctx: dict[str, Any] = {"source": (context or {}).get("source") or self.source}
        for name in ("session", "turn", "trace"):
            if (context or {}).get(name) is not None:
                ctx[name] = context[name]  # type: ignore[index]
        result = self.api.edit_memory(owner_id, edits, ctx)
        documents = [d for d in map(valid_document, result.get("documents") or []) if d is not None]
        with self._lock:
            entry = self._cache.get(owner_id)
            if entry is not None and documents:
                entry.generation += 1
                entry.etag = None  # the next read is a full one
                entry.docs = merge_newest(entry.docs or [], documents)
        return {"changed": result.get("changed", 0), "documents": documents, "edits": result.get("edits", [])}

    def health(self) -> dict[str, Any]:
        if self._closed:
            return {"ok": False, "detail": "closed"}
        if self._last_error is not None:
            return {"ok": False, "detail": f"the last refresh failed ({self._last_error.reason})"}
        return {"ok": True, "detail": f"{len(self._cache)} owners cached"}

    def close(self) -> None:
        """Stop refreshing and drop the cache; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            self._cache.clear()

    # -- the cache --------------------------------------------------------------------

    def _entry(self, owner_id: str) -> _Entry:
        """The owner's entry, made most recent (created, evicting the oldest, if new); under the lock."""
        entry = self._cache.get(owner_id)
        if entry is None:
            entry = self._cache[owner_id] = _Entry()
            while len(self._cache) > self.max_owners:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(owner_id)
        return entry

    def _start(self, owner_id: str) -> Future[builtins.list[dict[str, Any]]]:
        if self._closed:
            raise ApiError("the provider is closed", reason="closed")
        with self._lock:
            entry = self._entry(owner_id)
            if entry.inflight is None:
                entry.inflight = self._pool.submit(
                    self._fetch, owner_id, entry, entry.generation, entry.etag if entry.docs is not None else None
                )
            return entry.inflight

    def _fetch(self, owner_id: str, entry: _Entry, generation: int, etag: str | None) -> builtins.list[dict[str, Any]]:
        try:
            reply = self.api.memory_documents(owner_id, etag)
            docs = (
                None
                if reply.status == 304
                else [
                    d
                    for d in map(valid_document, (reply.body or {}).get("documents") or [])
                    if d is not None and d["version"] > 0
                ]
            )
        except Exception as exc:
            failed = (
                exc if isinstance(exc, ApiError) else ApiError("the reply is not the documents", reason="bad_reply")
            )
            with self._lock:
                self._last_error = failed
                entry.inflight = None
                entry.retry_at = self.clock() + self.refresh_s  # a server that is down is not asked at every list()
            raise failed from None
        with self._lock:
            entry.inflight = None
            entry.fetched_at = self.clock()
            entry.retry_at = 0.0
            self._last_error = None
            if docs is not None:
                fresh = generation == entry.generation  # no apply landed meanwhile
                entry.docs = docs if fresh else merge_newest(entry.docs or [], docs)
                entry.etag = reply.etag if fresh else None
            return list(entry.docs or [])


def _bound(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default
