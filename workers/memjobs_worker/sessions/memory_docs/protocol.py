"""The versioned ``MemoryProvider`` protocol: where USER.md and MEMORY.md live.

What: the seam between the memory service (the only writer) and the storage of
the Markdown memory documents. A provider offers a synchronous, bounded
snapshot (:meth:`MemoryProvider.list`) and applies one already-validated
full-document write checked against a version (:meth:`MemoryProvider.apply`).
Everything a provider returns goes through :func:`normalise_documents`, so a
host-injected provider cannot hand the service an oversized, duplicated or
unknown document.

Why a version: several workers, several hosts and the realtime tool write the
same owner's documents. The service reads a document at version ``v``,
computes the new content and asks the provider to apply it only if the
document is still at ``v``; otherwise the provider raises
:class:`VersionConflict` and the service re-reads and retries. No update is
ever lost, whatever the provider's storage.

    TransientError (memjobs_client.errors)
    └── VersionConflict   the document changed since it was read: re-read, retry
"""

from __future__ import annotations

import builtins
import itertools
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Literal

from memjobs_client.errors import InvalidPayload, TransientError

#: Bumped when the provider protocol changes incompatibly; load_provider refuses others.
PROTOCOL_VERSION = 1

DOC_USER = "USER.md"
DOC_MEMORY = "MEMORY.md"
#: The only documents the memory service reads and writes, in snapshot order.
WRITABLE_DOCS: tuple[str, ...] = (DOC_USER, DOC_MEMORY)

Scope = Literal["user", "memory"]
SCOPES: dict[str, Scope] = {DOC_USER: "user", DOC_MEMORY: "memory"}
_DOC_OF_SCOPE: dict[str, str] = {scope: doc for doc, scope in SCOPES.items()}

#: How many items of a provider's answer normalise_documents looks at, at most.
MAX_SCANNED_DOCS = 32

_OWNER_KEY = re.compile(r"[0-9a-f]{64}")


class VersionConflict(TransientError):
    """The document is no longer at the expected version: re-read and retry."""

    reason = "version_conflict"


@dataclass(frozen=True)
class ProviderInfo:
    """What :meth:`MemoryProvider.describe` answers."""

    protocol_version: int
    key: str  # short machine name, e.g. "markdown"
    label: str  # for people, e.g. "Markdown files"


@dataclass(frozen=True)
class Document:
    """One memory document at one version; version 0 is "never written" (empty)."""

    doc: str
    scope: Scope
    content: str
    version: int


@dataclass(frozen=True)
class Change:
    """One full-document write: the whole new ``content`` of ``doc``."""

    doc: str
    content: str


@dataclass(frozen=True)
class ApplyResult:
    """The document's version after a write (the version before plus one)."""

    doc: str
    version: int


@dataclass(frozen=True)
class Health:
    ok: bool
    detail: str = ""


def check_owner_key(owner_key: object) -> str:
    """Return ``owner_key`` if it is a hex sha256 (see ``memjobs_client.contracts.owner_key``).

    Raises:
        InvalidPayload: anything else (it also names a directory: no traversal).
    """
    if not isinstance(owner_key, str) or _OWNER_KEY.fullmatch(owner_key) is None:
        raise InvalidPayload("owner_key must be the hex sha256 of the owner id", reason="owner_key")
    return owner_key


def empty_document(doc: str) -> Document:
    """The document as it is before its first write."""
    return Document(doc=doc, scope=SCOPES[doc], content="", version=0)


class MemoryProvider(ABC):
    """Storage of one owner's USER.md and MEMORY.md (protocol :data:`PROTOCOL_VERSION`).

    A host implements this class to keep the documents elsewhere; the built-in
    implementations are ``MarkdownFileProvider`` and ``SqlMemoryProvider``.
    Providers never validate content (the service does) and never write a
    document other than those in :data:`WRITABLE_DOCS`.
    """

    @abstractmethod
    def describe(self) -> ProviderInfo:
        """The protocol version this provider implements, its key and label."""

    @abstractmethod
    def list(self, owner_key: str, *, max_docs: int, max_chars: int) -> builtins.list[Document]:
        """A synchronous, bounded snapshot of the owner's documents.

        At most ``max_docs`` documents of at most ``max_chars`` characters each.
        A document that was never written may be left out (it reads as empty,
        version 0); one that has a version must be returned.
        """

    @abstractmethod
    def apply(self, owner_key: str, change: Change, *, expected_version: int | None) -> ApplyResult:
        """Replace the whole content of ``change.doc``, atomically.

        Parameters:
            expected_version: the version the new content was computed from;
                ``None`` writes unconditionally.

        Raises:
            VersionConflict: the document is not at ``expected_version``;
                nothing was written.
            BackendUnavailable: the storage did not answer.
        """

    @abstractmethod
    def health(self) -> Health:
        """Whether the storage answers; never raises."""

    @abstractmethod
    def close(self) -> None:
        """Release what the provider holds; idempotent."""

    def serialise(self, owner_key: str) -> AbstractContextManager[None]:
        """Hold the owner's documents for a read-then-apply (optional).

        The service takes this around each read-modify-write so that writers
        wait for each other instead of conflicting. Correctness never depends
        on it: :meth:`apply` still checks the version. The default holds nothing.
        """
        return nullcontext()


def _field(item: object, name: str) -> object:
    if isinstance(item, Mapping):
        return item.get(name)
    return getattr(item, name, None)


def _doc_name(item: object) -> str | None:
    """The canonical doc name of an item, from its doc name or, failing that, its scope."""
    doc, scope = _field(item, "doc"), _field(item, "scope")
    name: str | None = None
    if isinstance(doc, str):
        name = next((d for d in WRITABLE_DOCS if d.lower() == doc.strip().lower()), None)
        if name is None:
            return None  # ASSISTANT.md or anything else: never a memory document
    if isinstance(scope, str):
        from_scope = _DOC_OF_SCOPE.get(scope.strip().lower())
        if from_scope is None or (name is not None and from_scope != name):
            return None  # unknown scope, or a scope that contradicts the doc name
        name = from_scope
    elif scope is not None:
        return None
    return name


def normalise_documents(docs: object, max_chars: int) -> builtins.list[Document]:
    """Make a provider's answer safe to use: valid, unique, bounded documents.

    Accepts :class:`Document` objects or mappings with ``doc`` and/or
    ``scope``, ``content`` and ``version``. Drops items whose doc name is not
    USER.md or MEMORY.md (case and surrounding space ignored), whose scope
    contradicts it, whose content is not text or whose version is not a
    non-negative integer. Of the same document twice, keeps the higher
    version. Caps content at ``max_chars`` characters, sets the scope from the
    doc name, looks at :data:`MAX_SCANNED_DOCS` items at most, and returns the
    documents in :data:`WRITABLE_DOCS` order.
    """
    if isinstance(docs, str | bytes | Mapping) or not isinstance(docs, Iterable):
        return []
    best: dict[str, Document] = {}
    for item in itertools.islice(docs, MAX_SCANNED_DOCS):
        name = _doc_name(item)
        content, version = _field(item, "content"), _field(item, "version")
        if name is None or not isinstance(content, str):
            continue
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            continue
        kept = best.get(name)
        if kept is None or version > kept.version:
            best[name] = Document(name, SCOPES[name], content[: max(max_chars, 0)], version)
    return [best[d] for d in WRITABLE_DOCS if d in best]
