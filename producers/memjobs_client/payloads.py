"""Building the messages' payloads from a caller's arguments: validated under
the source rules, owner ids turned into keys, session secrets redacted, a
corpus cut into parts. Used by :class:`~memjobs_client.client.MemjobsClient`;
the worker validates what arrives with the same :func:`validate`."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from memjobs_client import contracts
from memjobs_client.contracts import ReindexKnowledge, SourceRules
from memjobs_client.errors import InvalidPayload
from memjobs_client.sensitive import redact_secrets
from memjobs_client.validation import as_list, validate

#: At most this many roots a reindex may allow.
MAX_ROOTS = 32


def build_payload(
    model: type[contracts._Payload], *, rules: SourceRules | None = None, **fields: Any
) -> dict[str, Any]:
    """Validate ``fields`` against a contract under ``rules`` and return the message payload.

    Raises:
        SensitiveContent: a field carries a credential.
        InvalidPayload: the first few problems, field by field, and a count.
    """
    return validate(model, fields, rules).model_dump(mode="json")


def corpus_payloads(
    key: str, documents: Any, allowed_roots: Any, part_size: int, rules: SourceRules
) -> list[dict[str, Any]]:
    """The reindex messages of one corpus: one, or parts of ``part_size``
    documents (every part validated before any is sent).

    Raises:
        InvalidPayload: malformed documents, more than ``MAX_CORPUS_PARTS`` parts.
        SensitiveContent: a document or a path carries a credential.
    """
    size = max(1, min(part_size, contracts.MAX_CORPUS_DOCUMENTS))
    docs = [
        document_payload(d)
        for d in as_list(
            "ReindexKnowledge", "documents", documents, contracts.MAX_CORPUS_DOCUMENTS * contracts.MAX_CORPUS_PARTS
        )
    ]
    roots = as_list("ReindexKnowledge", "allowed_roots", allowed_roots, MAX_ROOTS)
    groups = [docs[i : i + size] for i in range(0, len(docs), size)] or [[]]
    if len(groups) > contracts.MAX_CORPUS_PARTS:
        raise InvalidPayload(
            f"documents: {len(docs)}, over the limit of "
            f"{contracts.MAX_CORPUS_PARTS * size} ({contracts.MAX_CORPUS_PARTS} parts of {size})"
        )
    corpus_id = uuid.uuid4().hex
    return [
        build_payload(
            ReindexKnowledge,
            rules=rules,
            owner_key=key,
            consent=True,
            documents=group,
            allowed_roots=roots,
            part=None if len(groups) == 1 else {"corpus_id": corpus_id, "index": i, "count": len(groups)},
        )
        for i, group in enumerate(groups, start=1)
    ]


def document_payload(doc: Any) -> Any:
    """One document of a reindex as the contract takes it (anything but a path
    or a mapping is passed on for the contract to refuse)."""
    if not isinstance(doc, str):
        return dict(doc) if isinstance(doc, Mapping) else doc
    try:
        doc.encode("utf-8")
    except UnicodeEncodeError:
        # A name of undecodable bytes (os.fsdecode's surrogates) cannot travel as text.
        name = os.fsencode(os.path.basename(doc)).decode("utf-8", "backslashreplace")[:300]
        return {"doc_id": contracts.knowledge_path_id(doc), "title": name or "file", "reason": "undecodable_name"}
    return {"path": doc}


def redacted(items: Any, fields: tuple[str, ...]) -> Any:
    """``items`` with secrets redacted in the named text fields of each mapping;
    anything else is passed on untouched for the contract to judge."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        return items
    out: list[Any] = []
    for item in items:
        if isinstance(item, Mapping):
            item = {k: redact_secrets(v) if k in fields and isinstance(v, str) else v for k, v in item.items()}
        out.append(item)
    return out


def owner_key_of(owner_id: Any, refusal: str | None = None) -> str:
    """The owner's key, or InvalidPayload with ``refusal`` (default: what is wrong with the id)."""
    try:
        return contracts.owner_key(owner_id)
    except ValueError as exc:
        raise InvalidPayload(refusal or str(exc)) from None
