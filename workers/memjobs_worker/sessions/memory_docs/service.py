"""The memory service: the only writer of an owner's USER.md and MEMORY.md.

What: ``read``, ``append`` and ``replace``, one atomic operation per call, on
top of any :class:`~memjobs_worker.sessions.memory_docs.protocol.MemoryProvider`. The realtime
``memory`` tool and the consolidation job both go through it.

Why it is safe to call from several workers, hosts and the realtime tool at
once: every write re-reads the latest document, computes the new content and
asks the provider to apply it at the version it read. Writers of one owner are
serialised (a lock per owner in the process, and the provider's own
``serialise``: ``flock`` for files, an advisory lock for SQL), and if another
writer got in anyway the provider raises ``VersionConflict``: the service
re-reads and tries again, ``max_attempts`` times in all, then raises
``VersionConflict`` (a ``TransientError``: the job is retried). Nothing is
ever lost or half-written.

Results and errors: a patch refused for its content comes back as
``OpResult(applied=False, reason=...)`` so that the consolidation job can audit
each patch and carry on (the reasons: ``patches.REASONS``). Wrong argument types
and a malformed owner key raise ``InvalidPayload``; storage failures raise
``BackendUnavailable``. ``OpResult.raise_for_refusal()`` turns a refusal into
the matching error (``SensitiveContent`` for secrets) for callers that want one.
Every patch, refused or not, is recorded in the audit log without its text.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Literal

from memjobs_client.errors import (
    BackendUnavailable,
    ConfigurationError,
    InvalidPayload,
    MemjobsError,
    SensitiveContent,
)
from memjobs_client.sensitive import find_sensitive_text
from memjobs_worker.sessions.memory_docs.audit import AuditLog
from memjobs_worker.sessions.memory_docs.patches import Plan, Reason, plan_append, plan_replace
from memjobs_worker.sessions.memory_docs.protocol import (
    WRITABLE_DOCS,
    ApplyResult,
    Change,
    Document,
    MemoryProvider,
    VersionConflict,
    check_owner_key,
    empty_document,
    normalise_documents,
)

log = logging.getLogger(__name__)

Op = Literal["append", "replace"]

#: The write path reads this many times max_doc_chars, to tell a document
#: edited past its bound (which may still be shortened) from a cut snapshot.
READ_SLACK = 4
_STRIPES = 64


@dataclass(frozen=True)
class OpResult:
    """The outcome of one patch.

    ``version`` is the document's version after the patch, or the version the
    refusal was decided on; ``None`` when it was refused before reading.
    ``reason`` is ``None`` exactly when ``applied``.
    """

    applied: bool
    doc: str
    version: int | None
    reason: Reason | None = None

    def raise_for_refusal(self) -> None:
        """Raise the error matching a refusal; no-op when applied or a duplicate.

        Raises:
            SensitiveContent: reason ``sensitive_content``.
            InvalidPayload: any other refusal (its ``reason`` is the code).
        """
        if self.applied or self.reason in (None, "duplicate"):
            return
        if self.reason == "sensitive_content":
            raise SensitiveContent(f"memory patch to {self.doc} refused: it looks like a credential")
        raise InvalidPayload(f"memory patch refused: {self.reason}", reason=self.reason)


class MemoryService:
    """Bounded, serialised, audited patches to USER.md and MEMORY.md.

    Parameters:
        provider: where the documents live.
        max_doc_chars: a document's bound, in characters (not bytes).
        max_change_chars: the bound of the text of one patch, in characters.
        max_attempts: reads-then-applies per patch before giving up on conflicts.
        audit: where each patch is recorded; ``None`` records nothing.
    """

    def __init__(self, provider: MemoryProvider, *, max_doc_chars: int = 8000,
                 max_change_chars: int = 1000, max_attempts: int = 5,
                 audit: AuditLog | None = None) -> None:
        if min(max_doc_chars, max_change_chars, max_attempts) < 1:
            raise ConfigurationError("memory bounds and max_attempts must be positive")
        self.provider = provider
        self.max_doc_chars = max_doc_chars
        self.max_change_chars = max_change_chars
        self.max_attempts = max_attempts
        self.audit = audit
        self._stripes = tuple(threading.Lock() for _ in range(_STRIPES))

    # -- reads --------------------------------------------------------------------

    def snapshot(self, owner_key: str) -> list[Document]:
        """Both documents (empty ones at version 0), each capped at ``max_doc_chars``."""
        found = {d.doc: d for d in self._list(check_owner_key(owner_key), self.max_doc_chars)}
        return [found.get(doc) or empty_document(doc) for doc in WRITABLE_DOCS]

    def read(self, owner_key: str, doc: str) -> Document:
        """The latest ``doc``, capped at ``max_doc_chars``; empty at version 0 if never written.

        Raises:
            InvalidPayload: ``doc`` is not USER.md or MEMORY.md (reason
                ``forbidden_document``), or the owner key is malformed.
        """
        if doc not in WRITABLE_DOCS:
            raise InvalidPayload(f"not a memory document: {doc!r}", reason="forbidden_document")
        return self._find(self._list(check_owner_key(owner_key), self.max_doc_chars), doc)

    # -- writes -------------------------------------------------------------------

    def append(self, owner_key: str, doc: str, text: str, *,
               session_id: str | None = None) -> OpResult:
        """Append Markdown ``text`` (on its own line) to ``doc``.

        A text already present as whole lines is a no-op (reason
        ``duplicate``), so a redelivered job adds nothing more.
        """
        _check_text(text=text)
        body = text.strip("\r\n")

        def plan(current: Document) -> Plan:
            return plan_append(current.content, body, max_doc_chars=self.max_doc_chars)

        refusal = self._precheck(doc, body, body)
        return self._write("append", owner_key, doc, plan, refusal, session_id)

    def replace(self, owner_key: str, doc: str, old_text: str, new_text: str, *,
                session_id: str | None = None) -> OpResult:
        """Replace the unique match of ``old_text`` in ``doc`` by ``new_text``.

        An empty ``new_text`` deletes the match (and its line, if it was a
        whole line). No match: ``not_found``, or ``duplicate`` if ``new_text``
        is already there; several matches: ``ambiguous``. Nothing is written then.
        """
        _check_text(old_text=old_text, new_text=new_text)

        def plan(current: Document) -> Plan:
            return plan_replace(current.content, old_text, new_text, max_doc_chars=self.max_doc_chars)

        refusal = self._precheck(doc, old_text, new_text, longest=max(len(old_text), len(new_text)))
        return self._write("replace", owner_key, doc, plan, refusal, session_id)

    # -- the machinery --------------------------------------------------------------

    def _precheck(self, doc: str, needle: str, added: str, *, longest: int | None = None) -> Reason | None:
        """Refusals decided without reading: document, emptiness, size, secrets."""
        if doc not in WRITABLE_DOCS:
            return "forbidden_document"
        if not needle.strip():
            return "empty"
        if (len(added) if longest is None else longest) > self.max_change_chars:
            return "too_long"
        if added and find_sensitive_text(added) is not None:
            return "sensitive_content"
        return None

    def _write(self, op: Op, owner_key: str, doc: str, plan: Callable[[Document], Plan],
               refusal: Reason | None, session_id: str | None) -> OpResult:
        check_owner_key(owner_key)
        try:
            result = self._attempts(owner_key, doc, plan) if refusal is None else \
                OpResult(False, doc, None, refusal)
        except MemjobsError as exc:
            self._record(owner_key, doc, op, False, exc.reason, None, session_id)
            raise
        self._record(owner_key, doc, op, result.applied, result.reason, result.version, session_id)
        return result

    def _attempts(self, owner_key: str, doc: str, plan: Callable[[Document], Plan]) -> OpResult:
        read_cap = self.max_doc_chars * READ_SLACK
        for _ in range(self.max_attempts):
            with ExitStack() as held:
                held.enter_context(self._stripes[hash(owner_key) % _STRIPES])
                held.enter_context(self.provider.serialise(owner_key))
                current = self._find(self._list(owner_key, read_cap), doc)
                decided = Plan(reason="too_long") if len(current.content) >= read_cap \
                    else plan(current)  # a cut snapshot must never be written back
                if decided.content is None:
                    return OpResult(False, doc, current.version, decided.reason)
                try:
                    applied = self._apply(owner_key, Change(doc, decided.content), current.version)
                except VersionConflict:
                    continue
            # Out of the serialised block: the write is committed before it is reported.
            version = applied.version if _is_version(applied.version) else current.version + 1
            return OpResult(True, doc, version, None)
        raise VersionConflict(f"{doc} kept changing: gave up after {self.max_attempts} attempts")

    def _list(self, owner_key: str, cap: int) -> list[Document]:
        try:
            raw = self.provider.list(owner_key, max_docs=len(WRITABLE_DOCS), max_chars=cap)
        except MemjobsError:
            raise
        except Exception as exc:  # a host's provider must not break the service
            raise BackendUnavailable(f"memory provider failed to list: {type(exc).__name__}") from exc
        return normalise_documents(raw, cap)

    def _apply(self, owner_key: str, change: Change, expected: int) -> ApplyResult:
        try:
            result = self.provider.apply(owner_key, change, expected_version=expected)
        except MemjobsError:
            raise
        except Exception as exc:
            raise BackendUnavailable(f"memory provider failed to apply: {type(exc).__name__}") from exc
        return result if isinstance(result, ApplyResult) else ApplyResult(change.doc, -1)

    @staticmethod
    def _find(docs: list[Document], doc: str) -> Document:
        return next((d for d in docs if d.doc == doc), None) or empty_document(doc)

    def _record(self, owner_key: str, doc: str, op: Op, applied: bool, reason: str | None,
                version: int | None, session_id: str | None) -> None:
        if self.audit is None:
            return
        try:
            self.audit.record(owner_key=owner_key, doc=doc, op=op, applied=applied, reason=reason,
                              version=version, session_id=session_id)
        except OSError as exc:  # the patch stands; losing its audit line must not undo it
            log.warning("memory audit not written: %s", exc.strerror)


def _check_text(**values: object) -> None:
    for name, value in values.items():
        if not isinstance(value, str):
            raise InvalidPayload(f"{name} must be text", reason="invalid_payload")


def _is_version(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
