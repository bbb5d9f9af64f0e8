"""Making a provider's answer safe to use: valid, unique, bounded documents.

Whatever a provider returns (its ``list``, the documents of its ``apply``)
goes through :func:`normalise_documents`, so a host-injected provider cannot
hand the service an oversized, duplicated or unknown document, nor one whose
scope contradicts its name."""

from __future__ import annotations

import builtins
import itertools
from collections.abc import Iterable, Mapping

from memjobs_worker.sessions.memory_docs.protocol import DOC_OF_SCOPE, WRITABLE_DOCS, Document, writable_document

#: How many items of a provider's answer normalise_documents looks at, at most.
MAX_SCANNED_DOCS = 32


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
        from_scope = DOC_OF_SCOPE.get(scope.strip().lower())
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
            best[name] = writable_document(name, content[: max(max_chars, 0)], version)
    return [best[d] for d in WRITABLE_DOCS if d in best]
