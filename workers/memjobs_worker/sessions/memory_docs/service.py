"""The memory service: the only writer of an owner's USER.md and MEMORY.md.

What: ``read``, ``append`` and ``replace`` (one atomic operation per call) and
``edit`` (several edits of one turn, applied in order, all or none, with one
result), on top of any :class:`~memjobs_worker.sessions.memory_docs.protocol.MemoryProvider`.
The memory tool (HTTP, the ``memory`` command) and the consolidation job all go
through it, each with a :class:`ChangeContext` saying who asked.

Why it is safe to call from several workers, hosts and the memory tool at
once: every write re-reads the latest documents, computes the new content and
asks the provider to apply it at the versions it read. Writers of one owner are
serialised (a lock per owner in the process, and the provider's own
``serialise``: ``flock`` for files, an advisory lock for SQL), and if another
writer got in anyway the provider raises ``VersionConflict``: the service
re-reads and tries again, ``max_attempts`` times in all, then raises
``VersionConflict`` (a ``TransientError``: the job is retried). Nothing is
ever lost or half-written.

Secrets: the text an edit adds is checked, and so is every document a turn
would write, read whole (its lines also read joined): a secret split across
edits or requests is refused (``sensitive_content``) when its second half would
land, and nothing of the turn is written.

Results and errors: a patch refused for its content comes back as
``OpResult(applied=False, reason=...)`` so that the consolidation job can audit
each patch and carry on (the reasons: ``patches.REASONS``). Wrong argument types
and a malformed owner raise ``InvalidPayload``; storage failures raise
``BackendUnavailable``. ``OpResult.raise_for_refusal()`` turns a refusal into
the matching error (``SensitiveContent`` for secrets) for callers that want one.
Every patch, refused or not, is recorded in the audit trail without its text.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Protocol

from memjobs_client.errors import ConfigurationError, InvalidPayload, MemjobsError
from memjobs_client.sensitive import find_sensitive_document, find_sensitive_text
from memjobs_worker.sessions.memory_docs.audit import AuditEntry
from memjobs_worker.sessions.memory_docs.calls import apply_changes, list_documents, serialise, settle
from memjobs_worker.sessions.memory_docs.outcomes import Edit, EditOutcome, OpResult, refused
from memjobs_worker.sessions.memory_docs.patches import Plan, Reason, plan_append, plan_replace
from memjobs_worker.sessions.memory_docs.protocol import (
    WRITABLE_DOCS,
    Change,
    ChangeContext,
    Document,
    MemoryProvider,
    OwnerKey,
    ProviderInfo,
    VersionConflict,
    empty_document,
    storage_key,
)

log = logging.getLogger(__name__)

#: The write path reads this many times max_doc_chars, to tell a document
#: edited past its bound (which may still be shortened) from a cut snapshot.
READ_SLACK = 4
_STRIPES = 64
#: Edits of one turn, at most.
MAX_EDITS = 20
#: The audit reason of the other edits of a turn that one refused edit stopped.
BATCH_REFUSED = "batch_refused"


class Audit(Protocol):
    """Where patches are recorded (:class:`~memjobs_worker.sessions.memory_docs.audit.AuditTrail`)."""

    def record(self, entries: Sequence[AuditEntry]) -> None: ...


@dataclass
class _Turn:
    """Edits planned against the documents read under the owner's serialisation."""

    read: dict[str, Document]
    contents: dict[str, str] = field(default_factory=dict)
    results: list[OpResult] = field(default_factory=list)
    failed: int | None = None


class MemoryService:
    """Bounded, serialised, audited patches to USER.md and MEMORY.md.

    Parameters:
        provider: where the documents live (any object with the provider's methods).
        max_doc_chars: a document's bound, in characters (not bytes).
        max_change_chars: the bound of the text of one patch, in characters.
        max_attempts: reads-then-applies per patch before giving up on conflicts.
        audit: where each patch is recorded; ``None`` records nothing.
    """

    def __init__(
        self,
        provider: MemoryProvider,
        *,
        max_doc_chars: int = 8000,
        max_change_chars: int = 1000,
        max_attempts: int = 5,
        audit: Audit | None = None,
    ) -> None:
        if min(max_doc_chars, max_change_chars, max_attempts) < 1:
            raise ConfigurationError("memory bounds and max_attempts must be positive")
        self.provider = provider
        self.max_doc_chars = max_doc_chars
        self.max_change_chars = max_change_chars
        self.max_attempts = max_attempts
        self.audit = audit
        self._stripes = tuple(threading.Lock() for _ in range(_STRIPES))
        self._info: ProviderInfo | None = None

    def close(self) -> None:
        """Close the provider (an async ``close`` is run to completion); never raises."""
        try:
            settle(self.provider.close())
        except Exception as exc:
            log.warning("memory provider did not close cleanly", extra={"error": type(exc).__name__})

    def describe(self) -> ProviderInfo | None:
        """The provider's ``{protocolVersion, key, label}`` (asked once: it is static),
        or ``None`` if it answers nonsense."""
        if self._info is None:
            try:
                self._info = ProviderInfo.coerce(self.provider.describe())
            except Exception:
                return None
        return self._info

    # -- reads --------------------------------------------------------------------

    def snapshot(self, owner: str) -> list[Document]:
        """Both documents (empty ones at version 0), each capped at ``max_doc_chars``.

        ``owner`` is the owner id (an :class:`OwnerKey` for the built-in providers)."""
        found = {d.doc: d for d in list_documents(self.provider, self._owner(owner), self.max_doc_chars)}
        return [found.get(doc) or empty_document(doc) for doc in WRITABLE_DOCS]

    def read(self, owner: str, doc: str) -> Document:
        """The latest ``doc``, capped at ``max_doc_chars``; empty at version 0 if never written.

        Raises:
            InvalidPayload: ``doc`` is not USER.md or MEMORY.md (reason
                ``forbidden_document``), or the owner is malformed.
        """
        if doc not in WRITABLE_DOCS:
            raise InvalidPayload(f"not a memory document: {doc!r}", reason="forbidden_document")
        return self._find(list_documents(self.provider, self._owner(owner), self.max_doc_chars), doc)

    # -- writes -------------------------------------------------------------------

    def append(self, owner: str, doc: str, text: str, *, context: ChangeContext | None = None) -> OpResult:
        """Append Markdown ``text`` (on its own line) to ``doc``.

        A text already present as whole lines is a no-op (reason
        ``duplicate``), so a redelivered job adds nothing more.
        """
        _check_text(text=text)
        return self._one(owner, Edit("append", doc, text=text), context, strict=False)

    def replace(
        self,
        owner: str,
        doc: str,
        old_text: str,
        new_text: str,
        *,
        context: ChangeContext | None = None,
        strict: bool = False,
    ) -> OpResult:
        """Replace the unique match of ``old_text`` in ``doc`` by ``new_text``.

        An empty ``new_text`` deletes the match (and its line, if it was a
        whole line). No match: ``not_found``, or ``duplicate`` if ``new_text``
        is already there (a consolidation patch applied twice; ``strict``: always
        ``not_found``, as a person or the memory tool means it); several
        matches: ``ambiguous``. Nothing is written then.
        """
        _check_text(old_text=old_text, new_text=new_text)
        return self._one(owner, Edit("replace", doc, old_text=old_text, new_text=new_text), context, strict=strict)

    def edit(self, owner: str, edits: Sequence[Edit], *, context: ChangeContext) -> EditOutcome:
        """A turn's edits, in order, as one: all applied, or none.

        Each edit sees the documents as the edits before it left them; one
        refused edit (``not_found``, ``ambiguous``, ``sensitive_content``, …)
        stops the turn and nothing is written. A ``replace`` whose ``old_text``
        is missing is ``not_found`` (strict). Every edit is audited.

        Raises:
            InvalidPayload: no edits, more than :data:`MAX_EDITS`, or a wrong type.
        """
        if not edits or len(edits) > MAX_EDITS:
            raise InvalidPayload(f"edits: 1 to {MAX_EDITS} edits", reason="invalid_payload")
        for e in edits:
            if e.op == "append":
                _check_text(text=e.text)
            elif e.op == "replace":
                _check_text(old_text=e.old_text, new_text=e.new_text)
            else:
                raise InvalidPayload("op: append or replace", reason="invalid_payload")
        return self._run(owner, list(edits), context, strict=True)

    def restore(self, owner: str, doc: str, content: str, *, context: ChangeContext) -> OpResult:
        """Write ``doc`` whole as ``content`` (an import of an owner's export): nothing
        when it already reads so (``duplicate``). Bounded and checked as any edit
        (``too_long``, ``sensitive_content``: nothing written); audited as a replace.

        Raises:
            InvalidPayload: ``doc`` is not USER.md or MEMORY.md, or a wrong type.
            VersionConflict: the document kept changing.
        """
        if doc not in WRITABLE_DOCS:
            raise InvalidPayload(f"not a memory document: {doc!r}", reason="forbidden_document")
        _check_text(text=content)
        key = storage_key(self._owner(owner))
        for _ in range(self.max_attempts):
            with ExitStack() as held:
                held.enter_context(self._stripes[hash(key) % _STRIPES])
                held.enter_context(serialise(self.provider, owner))
                current = self.read(owner, doc)
                if current.content == content:
                    return OpResult(False, doc, current.version, "duplicate")
                reason: Reason | None = None
                if len(content) > self.max_doc_chars:
                    reason = "too_long"
                elif find_sensitive_document(content) is not None:
                    reason = "sensitive_content"
                if reason is not None:
                    result = OpResult(False, doc, current.version, reason)
                    self._record(key, [Edit("replace", doc)], context, [result])
                    return result
                try:
                    written = apply_changes(self.provider, owner, [Change(doc, content, current.version)], context)
                except VersionConflict:
                    continue
            result = OpResult(True, doc, written.get(doc, current.version + 1), None)
            self._record(key, [Edit("replace", doc)], context, [result])
            return result
        raise VersionConflict(f"{doc} kept changing: gave up after {self.max_attempts} attempts")

    # -- the machinery --------------------------------------------------------------

    def _owner(self, owner: str) -> str:
        """Check ``owner``; an :class:`OwnerKey` only for a provider that stores by key."""
        storage_key(owner)
        if isinstance(owner, OwnerKey) and not getattr(self.provider, "accepts_owner_keys", False):
            raise InvalidPayload(
                "this memory provider needs the owner id, and the message "
                "carries only its key (queued by an older producer)",
                reason="owner_id_missing",
            )
        return owner

    def _one(self, owner: str, edit: Edit, context: ChangeContext | None, *, strict: bool) -> OpResult:
        outcome = self._run(owner, [edit], context, strict=strict)
        return outcome.results[0]

    def _precheck(self, edit: Edit) -> Reason | None:
        """Refusals decided without reading: document, emptiness, size, secrets."""
        if edit.op == "append":
            needle = added = (edit.text or "").strip("\r\n")
            longest = len(added)
        else:
            needle, added = edit.old_text or "", edit.new_text or ""
            longest = max(len(needle), len(added))
        if edit.doc not in WRITABLE_DOCS:
            return "forbidden_document"
        if not needle.strip():
            return "empty"
        if longest > self.max_change_chars:
            return "too_long"
        if added and find_sensitive_text(added) is not None:
            return "sensitive_content"
        return None

    def _run(self, owner: str, edits: list[Edit], context: ChangeContext | None, *, strict: bool) -> EditOutcome:
        key = storage_key(self._owner(owner))
        context = context or ChangeContext("unknown")
        try:
            outcome = self._decide(owner, edits, strict, context)
        except MemjobsError as exc:
            self._record(key, edits, context, [OpResult(False, e.doc, None, None) for e in edits], error=exc.reason)
            raise
        self._record(key, edits, context, list(outcome.results))
        return outcome

    def _decide(self, owner: str, edits: list[Edit], strict: bool, context: ChangeContext) -> EditOutcome:
        for index, e in enumerate(edits):
            refusal = self._precheck(e)
            if refusal is not None:
                return refused(edits, index, refusal, None)
        read_cap = self.max_doc_chars * READ_SLACK
        for _ in range(self.max_attempts):
            try:
                with ExitStack() as held:
                    held.enter_context(self._stripes[hash(storage_key(owner)) % _STRIPES])
                    held.enter_context(serialise(self.provider, owner))
                    turn = _Turn({d.doc: d for d in list_documents(self.provider, owner, read_cap)})
                    self._plan(turn, edits, read_cap, strict)
                    if turn.failed is None:
                        self._check_documents(turn, edits)
                    if turn.failed is not None:
                        failed = turn.results[turn.failed]
                        return refused(edits, turn.failed, failed.reason or "not_found", failed.version)
                    changes = [
                        Change(doc, text, self._find_in(turn.read, doc).version)
                        for doc, text in turn.contents.items()
                        if text != self._find_in(turn.read, doc).content
                    ]
                    written = apply_changes(self.provider, owner, changes, context) if changes else {}
                # Out of the serialised block: the write is committed before it is reported.
            except VersionConflict:
                continue  # raised through the block: the provider's transaction rolled back
            versions = {c.doc: written.get(c.doc, self._find_in(turn.read, c.doc).version + 1) for c in changes}
            results = tuple(
                OpResult(True, r.doc, versions.get(r.doc, r.version), None) if r.applied else r for r in turn.results
            )
            documents = tuple(
                Document(c.doc, self._find_in(turn.read, c.doc).scope, c.content, versions[c.doc]) for c in changes
            )
            return EditOutcome(True, results, len(changes), documents)
        raise VersionConflict(
            f"{', '.join(sorted({e.doc for e in edits}))} kept changing: gave up after {self.max_attempts} attempts"
        )

    def _plan(self, turn: _Turn, edits: list[Edit], read_cap: int, strict: bool) -> None:
        for index, e in enumerate(edits):
            current = self._find_in(turn.read, e.doc)
            content = turn.contents.get(e.doc, current.content)
            decided: Plan
            if len(current.content) >= read_cap:
                decided = Plan(reason="too_long")  # a cut snapshot must never be written back
            elif e.op == "append":
                decided = plan_append(content, (e.text or "").strip("\r\n"), max_doc_chars=self.max_doc_chars)
            else:
                decided = plan_replace(content, e.old_text or "", e.new_text or "", max_doc_chars=self.max_doc_chars)
                if strict and decided.reason == "duplicate" and (e.old_text or "") not in content:
                    decided = Plan(reason="not_found")
            if decided.content is not None:
                turn.contents[e.doc] = decided.content
                turn.results.append(OpResult(True, e.doc, None, None))
            elif decided.reason == "duplicate":
                turn.results.append(OpResult(False, e.doc, current.version, "duplicate"))
            else:
                turn.results.append(OpResult(False, e.doc, current.version, decided.reason))
                turn.failed = index
                return

    def _check_documents(self, turn: _Turn, edits: list[Edit]) -> None:
        """Refuse the turn when a document it would write fails the sensitivity
        check read whole (:func:`find_sensitive_document`): a secret split over
        edits ("- 我的银行卡密码是", then "- 739164") is caught when the second
        half lands, whichever edit or request brought the first. The last edit
        of that document is the one refused (``sensitive_content``), so the
        doors answer as for a secret in one edit. A document that already holds
        such a secret takes only the edits that clear it (a deletion)."""
        for doc, content in turn.contents.items():
            if content == self._find_in(turn.read, doc).content:
                continue
            if find_sensitive_document(content) is None:
                continue
            last = max(i for i, e in enumerate(edits) if e.doc == doc)
            turn.results[last] = OpResult(False, doc, self._find_in(turn.read, doc).version, "sensitive_content")
            turn.failed = last
            log.info("memory edit refused: the document it would write fails the sensitivity check", extra={"doc": doc})
            return

    @staticmethod
    def _find(docs: list[Document], doc: str) -> Document:
        return next((d for d in docs if d.doc == doc), None) or empty_document(doc)

    @staticmethod
    def _find_in(read: dict[str, Document], doc: str) -> Document:
        return read.get(doc) or empty_document(doc)

    def _record(
        self, key: str, edits: list[Edit], context: ChangeContext, results: list[OpResult], error: str | None = None
    ) -> None:
        if self.audit is None:
            return
        entries = []
        for index, e in enumerate(edits):
            r = results[index] if index < len(results) else OpResult(False, e.doc, None, None)
            reason = error or r.reason or (None if r.applied else BATCH_REFUSED)
            entries.append(
                AuditEntry.of(
                    owner_key=key,
                    doc=e.doc,
                    op=e.op,
                    applied=r.applied,
                    reason=reason,
                    version=r.version,
                    context=context,
                )
            )
        try:
            self.audit.record(entries)
        except Exception as exc:  # the patch stands; losing its audit row must not undo it
            log.warning("memory audit not written", extra={"error": type(exc).__name__})


def _check_text(**values: object) -> None:
    for name, value in values.items():
        if not isinstance(value, str):
            raise InvalidPayload(f"{name} must be text", reason="invalid_payload")
