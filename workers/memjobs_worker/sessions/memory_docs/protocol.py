"""The versioned ``MemoryProvider`` protocol: where USER.md and MEMORY.md live.

What: the seam between the memory service (the only writer) and the storage of
the Markdown memory documents, in the shape of the seeds' ``MemoryProvider``:

- ``describe()`` -> ``{protocolVersion, key, label}`` (a :class:`ProviderInfo`
  or that mapping);
- ``list(owner_id, options)``: a synchronous, bounded snapshot of the owner's
  documents (:class:`ListOptions` bounds it; a remote provider keeps a cache);
- ``apply(owner_id, changes, context)``: may be async (a coroutine is run to
  completion); ``changes`` is a list of whole-document writes, each checked
  against the version it was computed from; ``context`` (:class:`ChangeContext`:
  source, session, turn, trace) comes from the producer, never from the model;
  returns ``{changed, documents}`` (an :class:`ApplyResult` or that mapping);
- ``health()`` -> ``{ok, detail}``; ``close()``.

The provider receives the **owner id** as the producer gave it, so that an
adapter can do its own tenant mapping; the built-in providers store under
sha256(owner id) (:func:`storage_key`), as before, so existing data needs no
migration. A provider may be any object with these five methods (subclassing
:class:`MemoryProvider` is a convenience, not a requirement). Everything a
provider returns goes through ``normalise.normalise_documents``, so a host-injected
provider cannot hand the service an oversized, duplicated or unknown document.

Why a version: several workers, several hosts and the memory tool write the
same owner's documents. The service reads a document at version ``v``,
computes the new content and asks the provider to apply it only if the
document is still at ``v``; otherwise the provider raises
:class:`VersionConflict` (nothing of the call applied) and the service re-reads
and retries. No update is ever lost, whatever the provider's storage.

    TransientError (memjobs_client.errors)
    └── VersionConflict   the document changed since it was read: re-read, retry
"""

from __future__ import annotations

import builtins
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

from memjobs_client.contracts import owner_key as _owner_key
from memjobs_client.errors import InvalidPayload, TransientError

#: Bumped when the provider protocol changes incompatibly; load_provider refuses others.
#: 2: the seeds' shape (owner id, a list of changes with a context, ``{changed, documents}``).
PROTOCOL_VERSION = 2
#: The name the seeds' code imports (``MEMORY_PROVIDER_PROTOCOL_VERSION``): the same constant.
MEMORY_PROVIDER_PROTOCOL_VERSION = PROTOCOL_VERSION

DOC_USER = "USER.md"
DOC_MEMORY = "MEMORY.md"
#: The only documents the memory service reads and writes, in snapshot order.
WRITABLE_DOCS: tuple[str, ...] = (DOC_USER, DOC_MEMORY)

Scope = Literal["user", "memory"]
SCOPES: dict[str, Scope] = {DOC_USER: "user", DOC_MEMORY: "memory"}
DOC_OF_SCOPE: dict[str, str] = {scope: doc for doc, scope in SCOPES.items()}

#: The methods every provider has (``serialise`` is optional).
PROVIDER_METHODS = ("describe", "list", "apply", "health", "close")

_OWNER_KEY = re.compile(r"[0-9a-f]{64}")
#: A producer's id (session, turn, trace): any text but control characters, as
#: session ids are ("s/1 é" included); lone surrogates are refused too.
_CONTEXT_ID = re.compile(r"[^\x00-\x1f\x7f\ud800-\udfff]{1,128}")
_SOURCE = re.compile(r"[a-z][a-z0-9_.-]{0,39}")


class VersionConflict(TransientError):
    """The document is no longer at the expected version: re-read and retry."""

    reason = "version_conflict"


@dataclass(frozen=True)
class ProviderInfo:
    """What :meth:`MemoryProvider.describe` answers (``{protocolVersion, key, label}``)."""

    protocol_version: int
    key: str  # short machine name, e.g. "markdown"
    label: str  # for people, e.g. "Markdown files"

    def as_json(self) -> dict[str, Any]:
        return {"protocolVersion": self.protocol_version, "key": self.key, "label": self.label}

    @classmethod
    def coerce(cls, value: object) -> ProviderInfo | None:
        """A :class:`ProviderInfo` from one, or from the seeds' mapping; ``None`` if neither."""
        if isinstance(value, ProviderInfo):
            return value
        if not isinstance(value, Mapping):
            return None
        version = value.get("protocolVersion", value.get("protocol_version"))
        key, label = value.get("key"), value.get("label", value.get("key"))
        if not isinstance(version, int) or isinstance(version, bool) or not isinstance(key, str):
            return None
        return cls(version, key, label if isinstance(label, str) else key)


@dataclass(frozen=True)
class ListOptions:
    """The bounds of a snapshot: at most ``max_docs`` documents of ``max_chars`` characters."""

    max_docs: int
    max_chars: int

    def as_json(self) -> dict[str, int]:
        return {"maxDocs": self.max_docs, "maxChars": self.max_chars}


@dataclass(frozen=True)
class Document:
    """One memory document at one version; version 0 is "never written" (empty)."""

    doc: str
    scope: Scope
    content: str
    version: int

    def as_json(self) -> dict[str, Any]:
        return {"doc": self.doc, "scope": self.scope, "content": self.content, "version": self.version}


@dataclass(frozen=True)
class Change:
    """One whole-document write: the new ``content`` of ``doc``, computed from
    ``expected_version`` (``None``: unconditional)."""

    doc: str
    content: str
    expected_version: int | None = None

    @property
    def scope(self) -> Scope:
        return SCOPES[self.doc]

    def as_json(self) -> dict[str, Any]:
        return {"doc": self.doc, "scope": self.scope, "content": self.content, "expectedVersion": self.expected_version}


@dataclass(frozen=True)
class ChangeContext:
    """Who asked for a change, supplied by the producer (never by the model).

    ``source``: ``consolidation``, ``memory_tool``, ``cli`` or what a gateway
    names; ``session``, ``turn``, ``trace``: the producer's ids, when it has them.
    """

    source: str
    session: str | None = None
    turn: str | None = None
    trace: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or _SOURCE.fullmatch(self.source) is None:
            raise InvalidPayload(
                "context.source: 1-40 characters a-z 0-9 _ . - starting with a letter", reason="invalid_payload"
            )
        for name in ("session", "turn", "trace"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or _CONTEXT_ID.fullmatch(value) is None):
                raise InvalidPayload(
                    f"context.{name}: 1-128 characters, no control characters", reason="invalid_payload"
                )

    def as_json(self) -> dict[str, Any]:
        return {"source": self.source, "session": self.session, "turn": self.turn, "trace": self.trace}


@dataclass(frozen=True)
class ApplyResult:
    """What :meth:`MemoryProvider.apply` answers (``{changed, documents}``): how
    many documents changed, and the changed documents as they are now."""

    changed: int
    documents: tuple[Document, ...] = ()


@dataclass(frozen=True)
class Health:
    ok: bool
    detail: str = ""

    @classmethod
    def coerce(cls, value: object) -> Health:
        """A :class:`Health` from one, or from ``{ok, detail}``; anything else is not ok."""
        if isinstance(value, Health):
            return value
        if isinstance(value, Mapping) and isinstance(value.get("ok"), bool):
            detail = value.get("detail", "")
            return cls(value["ok"], detail[:200] if isinstance(detail, str) else "")
        return cls(False, "health() answered something else than {ok, detail}")


class OwnerKey(str):
    """An owner known only by its storage key, sha256(owner id).

    A consolidation message queued by a producer older than the owner id in
    its payload carries the key alone; the built-in providers (which store by
    key) accept it, a host's provider refuses it (it needs the id to map tenants).
    """

    __slots__ = ()


def check_owner_key(owner_key: object) -> str:
    """Return ``owner_key`` if it is a hex sha256 (see ``memjobs_client.contracts.owner_key``).

    Raises:
        InvalidPayload: anything else (it also names a directory: no traversal).
    """
    if not isinstance(owner_key, str) or _OWNER_KEY.fullmatch(owner_key) is None:
        raise InvalidPayload("owner_key must be the hex sha256 of the owner id", reason="owner_key")
    return str(owner_key)


def storage_key(owner: object) -> str:
    """The key an owner is stored and audited under: sha256 of the owner id
    (an :class:`OwnerKey` is the key already).

    Raises:
        InvalidPayload: an empty or invalid owner id, or a malformed key.
    """
    if isinstance(owner, OwnerKey):
        return check_owner_key(owner)
    try:
        return _owner_key(owner)  # type: ignore[arg-type]
    except ValueError:
        raise InvalidPayload("owner_id: must be a non-empty string", reason="invalid_payload") from None


def check_writable(changes: Sequence[Change]) -> None:
    """What a built-in provider's :meth:`~MemoryProvider.apply` checks first: every
    change writes text to a document of :data:`WRITABLE_DOCS`.

    Raises:
        InvalidPayload: a change that does not (reason ``forbidden_document``).
    """
    for change in changes:
        if change.doc not in WRITABLE_DOCS or not isinstance(change.content, str):
            raise InvalidPayload(f"not a writable memory document: {change.doc!r}", reason="forbidden_document")


def check_version(change: Change, version: int) -> None:
    """What a built-in provider's :meth:`~MemoryProvider.apply` checks of every
    change before its first write: it expects no version, or ``version``, the
    document's current one.

    Raises:
        VersionConflict: it expects another.
    """
    if change.expected_version is not None and change.expected_version != version:
        raise VersionConflict(f"{change.doc} is at version {version}, not {change.expected_version}")


def writable_document(doc: str, content: str, version: int) -> Document:
    """A document of :data:`WRITABLE_DOCS`, with the scope its name gives it."""
    return Document(doc, SCOPES[doc], content, version)


def empty_document(doc: str) -> Document:
    """The document as it is before its first write."""
    return writable_document(doc, "", 0)


class MemoryProvider(ABC):
    """Storage of one owner's USER.md and MEMORY.md (protocol :data:`PROTOCOL_VERSION`).

    A host implements these methods to keep the documents elsewhere (this
    class is a convenient base; any object with the methods of
    :data:`PROVIDER_METHODS` is accepted). The built-in implementations are
    ``MarkdownFileProvider`` and ``SqlMemoryProvider``. Providers never
    validate content (the service does) and never write a document other than
    those in :data:`WRITABLE_DOCS`.
    """

    #: The built-in providers store by key and accept an :class:`OwnerKey`.
    accepts_owner_keys = False

    @abstractmethod
    def describe(self) -> ProviderInfo | Mapping[str, Any]:
        """``{protocolVersion, key, label}``: the protocol this provider implements."""

    @abstractmethod
    def list(self, owner_id: str, options: ListOptions) -> Iterable[Document | Mapping[str, Any]]:
        """A synchronous, bounded snapshot of the owner's documents.

        At most ``options.max_docs`` documents of at most ``options.max_chars``
        characters each. A document that was never written may be left out (it
        reads as empty, version 0); one that has a version must be returned.
        """

    @abstractmethod
    def apply(self, owner_id: str, changes: Sequence[Change], context: ChangeContext) -> Any:
        """Write each change's whole content, all of them or none (may be async).

        Returns ``{changed, documents}`` (an :class:`ApplyResult` or that
        mapping; a coroutine resolving to one): the number of documents
        written and those documents as they are now (with their new versions).

        Raises:
            VersionConflict: a document is not at its change's
                ``expected_version``; nothing was written.
            BackendUnavailable: the storage did not answer.
        """

    @abstractmethod
    def health(self) -> Health | Mapping[str, Any]:
        """Whether the storage answers (``{ok, detail}``); never raises."""

    @abstractmethod
    def close(self) -> Any:
        """Release what the provider holds; idempotent (may be async)."""

    def serialise(self, owner_id: str) -> AbstractContextManager[None]:
        """Hold the owner's documents for a read-then-apply (optional).

        The service takes this around each read-modify-write so that writers
        wait for each other instead of conflicting. Correctness never depends
        on it: :meth:`apply` still checks the versions. The default holds nothing.
        """
        return nullcontext()


def missing_methods(provider: object) -> builtins.list[str]:
    """The methods of :data:`PROVIDER_METHODS` that ``provider`` lacks."""
    return [m for m in PROVIDER_METHODS if not callable(getattr(provider, m, None))]
