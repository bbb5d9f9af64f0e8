"""Knowledge's payload: the owner's corpus (texts, paths, refusals), whole or in parts."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationInfo, field_validator

from memjobs_client.contracts.base import (
    DEFAULT_MAX_KNOWLEDGE_DOC_CHARS,
    MAX_CORPUS_DOCUMENTS,
    MAX_CORPUS_PARTS,
    _Payload,
)
from memjobs_client.validation import SafePath, SafeText


class KnowledgeText(BaseModel):
    """A document the host hands over as text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    doc_id: SafeText = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@/-]+$")
    title: SafeText = Field(min_length=1, max_length=300)
    text: SafeText = Field(max_length=DEFAULT_MAX_KNOWLEDGE_DOC_CHARS)


class KnowledgePath(BaseModel):
    """A local file the host names; the worker reads it, under ``allowed_roots`` only."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: SafePath = Field(min_length=1, max_length=4096)


class KnowledgeRefusal(BaseModel):
    """A document the producer could not even send (its name is not valid UTF-8):
    the worker records it as refused, so the owner's listing says why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    doc_id: str = Field(min_length=1, max_length=200, pattern=r"^file:[0-9a-f]{24}$")
    title: str = Field(min_length=1, max_length=300)
    reason: Literal["undecodable_name"]


class CorpusPart(BaseModel):
    """Part ``index`` of ``count`` of one corpus (``corpus_id``) sent in several messages.

    Each part is indexed on its own; the owner's documents absent from the
    corpus are removed once every part has been indexed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    corpus_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    index: int = Field(ge=1, le=MAX_CORPUS_PARTS)
    count: int = Field(ge=1, le=MAX_CORPUS_PARTS)

    @field_validator("count")
    @classmethod
    def _index_within(cls, count: int, info: ValidationInfo) -> int:
        if info.data.get("index", 1) > count:
            raise ValueError("index must not exceed count")
        return count


def _document_kind(value: Any) -> str:
    """``path`` for a path (a mapping with a ``path`` key), ``refusal`` for a
    document the producer could not send, else ``text``."""
    if isinstance(value, KnowledgePath) or (isinstance(value, Mapping) and "path" in value):
        return "path"
    if isinstance(value, KnowledgeRefusal) or (isinstance(value, Mapping) and "reason" in value):
        return "refusal"
    return "text"


Document = Annotated[
    Annotated[KnowledgeText, Tag("text")]
    | Annotated[KnowledgePath, Tag("path")]
    | Annotated[KnowledgeRefusal, Tag("refusal")],
    Discriminator(_document_kind),
]


class ReindexKnowledge(_Payload):
    """The owner's whole corpus (or one part of it, see :class:`CorpusPart`): index
    new and changed documents, drop removed ones.

    Only the host calls it, and only with the user's consent to send text to
    the embedding service; nothing exposes it to the model.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    consent: Literal[True]
    documents: tuple[Document, ...] = Field(max_length=MAX_CORPUS_DOCUMENTS)
    allowed_roots: tuple[SafeText, ...] = Field(default=(), max_length=32)
    part: CorpusPart | None = None


def knowledge_path_id(path: str) -> str:
    """The public id of a document read from ``path`` (absolute): a hash, so ids,
    listings and logs never show where a file lives. Works for any file name,
    including names that are not valid UTF-8 (``os.fsencode``)."""
    return "file:" + hashlib.sha256(os.fsencode(os.path.abspath(path))).hexdigest()[:24]
