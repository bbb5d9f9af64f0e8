"""Job contracts: the one module both producers and workers import.

A contract is a queue name, an actor name and a pydantic payload model with a
schema version. Producers build payloads with these models; workers validate
every message against the same models, so a message that does not fit is
refused at either end with the same words.

Owner ids never travel: a payload carries ``owner_key = sha256(owner_id)``,
so Redis, logs and metrics never see the raw id.

What a valid source is — its byte cap and the credential check — is one rule,
here: :class:`SourceRules` is the pydantic validation context both ends pass
to :func:`~memjobs_client.validation.validate`.  Every text-bearing field is
real text (no lone surrogate, no NUL); ids, a remembered text, a document's
text, title and path are refused when they carry a credential; a task's goal
keeps its words with the secret blanked out.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from memjobs_client.validation import (
    RedactedText,
    SafePath,
    SafeText,
    Text,
    refuse_large_transcript,
    refuse_sensitive,
    text_problem,
)

#: Bumped when a payload changes incompatibly; workers refuse other versions.
SCHEMA_VERSION = 1

#: Default cap on a source's text, in bytes of UTF-8.
DEFAULT_MAX_TEXT_BYTES = 32 * 1024

# Queues: remember and forget are millisecond jobs; extraction waits on a model,
# so it has its own queue and never holds up the fast ones.
QUEUE_REMEMBER = "memjobs_remember"
QUEUE_EXTRACT = "memjobs_extract"
QUEUE_FORGET = "memjobs_forget"
# Session-end model work (consolidation, digest), and the fast task ledger.
QUEUE_SESSION = "memjobs_session"
QUEUE_TASKS = "memjobs_tasks"
# Knowledge indexing (embedding calls, possibly large documents).
QUEUE_KNOWLEDGE = "memjobs_knowledge"
QUEUES = (QUEUE_REMEMBER, QUEUE_EXTRACT, QUEUE_FORGET, QUEUE_SESSION, QUEUE_TASKS, QUEUE_KNOWLEDGE)
#: The cheap jobs (milliseconds, no model): workers give them a pool of their
#: own, so that they never wait behind extraction, consolidation or reindexing.
CHEAP_QUEUES = (QUEUE_REMEMBER, QUEUE_FORGET, QUEUE_TASKS)
MODEL_QUEUES = tuple(q for q in QUEUES if q not in CHEAP_QUEUES)

ACTOR_REMEMBER = "remember_source"
ACTOR_EXTRACT = "extract_facts"
ACTOR_FORGET = "forget_source"
ACTOR_CONSOLIDATE = "consolidate_session"
ACTOR_DIGEST = "digest_session"
ACTOR_RECORD_TASK = "record_task"
ACTOR_REINDEX = "reindex_knowledge"

#: Documents per reindex message (a larger corpus is sent as several parts),
#: parts per corpus, and the characters of one inline document.
MAX_CORPUS_DOCUMENTS = 500
MAX_CORPUS_PARTS = 200
DEFAULT_MAX_KNOWLEDGE_DOC_CHARS = 200_000

#: Default cap on a session transcript, in bytes of UTF-8 over all turns.
DEFAULT_MAX_TRANSCRIPT_BYTES = 256 * 1024
#: Turns per transcript, tasks per session.
MAX_TURNS = 2000
MAX_TASKS = 100

TaskStatus = Literal["dispatched", "running", "succeeded", "failed", "cancelled"]
TERMINAL_TASK_STATUSES = frozenset({"succeeded", "failed", "cancelled"})

SourceKind = Literal["utterance", "explicit"]

_HEX64 = r"^[0-9a-f]{64}$"
_SOURCE_ID = r"^src_[0-9a-f]{32}$"


@dataclass(frozen=True)
class SourceRules:
    """What a valid source is: the limits both ends validate against.

    Passed as the validation context (``model_validate(data, context=rules)``);
    without one the defaults hold.  The credential check needs no setting.
    """

    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES
    max_transcript_bytes: int = DEFAULT_MAX_TRANSCRIPT_BYTES


def _rules(info: ValidationInfo) -> SourceRules:
    return info.context if isinstance(info.context, SourceRules) else SourceRules()


def owner_key(owner_id: str) -> str:
    """Return the storage key of an owner: the hex sha256 of the owner id.

    Raises:
        ValueError: the owner id is not a string, not valid text, or blank.
    """
    if not isinstance(owner_id, str):
        raise ValueError(f"owner_id must be a string, not {type(owner_id).__name__}")
    problem = text_problem(owner_id)
    if problem is not None:
        raise ValueError(f"owner_id is {problem}")
    if not owner_id.strip():
        raise ValueError("owner_id must be a non-empty string")
    return hashlib.sha256(owner_id.encode("utf-8")).hexdigest()


def normalize_text(text: str) -> str:
    """Normalise source text so the same words give the same content hash."""
    return unicodedata.normalize("NFC", text).strip()


def content_hash(text: str) -> str:
    """Hex sha256 of the normalised text (text that is not valid is refused by
    validation, but still hashes, so an id can be computed before it)."""
    return hashlib.sha256(normalize_text(text).encode("utf-8", "surrogatepass")).hexdigest()


def source_id_for(owner_key_hex: str, text: str) -> str:
    """Deterministic source id of (owner, content), known before any worker runs."""
    digest = hashlib.sha256(f"{owner_key_hex}:{content_hash(text)}".encode()).hexdigest()
    return f"src_{digest[:32]}"


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    schema_version: Literal[1] = 1  # SCHEMA_VERSION
    owner_key: str = Field(pattern=_HEX64)


class RememberSource(_Payload):
    """A user turn or an explicit "remember this" to write to the ledger."""

    source_id: str = Field(pattern=_SOURCE_ID)
    text: Text = Field(min_length=1)
    session_id: SafeText | None = Field(default=None, min_length=1, max_length=128)
    kind: SourceKind = "utterance"

    @field_validator("text")
    @classmethod
    def _source(cls, value: str, info: ValidationInfo) -> str:
        """The source rule, in order of cost: not blank, within the byte cap,
        no credential (real text was checked before)."""
        if not normalize_text(value):
            raise PydanticCustomError("blank", "text is blank")
        limit = _rules(info).max_text_bytes
        size = len(value.encode("utf-8"))
        if size > limit:
            raise PydanticCustomError(
                "too_large", "{size} bytes, over the limit of {limit} bytes", {"size": size, "limit": limit}
            )
        return refuse_sensitive(value)


class ExtractFacts(_Payload):
    """Wake the owner's extraction: learn a batch of their pending sources."""

    trigger: Literal["remember", "sweep", "forget", "manual", "session_end"] = "remember"


class ForgetSource(_Payload):
    """Host-initiated delete of one source and every memory derived from it."""

    source_id: str = Field(pattern=_SOURCE_ID)


class Turn(BaseModel):
    """One turn of a session transcript."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["user", "assistant"]
    text: Text = Field(min_length=1, max_length=DEFAULT_MAX_TRANSCRIPT_BYTES)
    ts: datetime


class TaskRef(BaseModel):
    """A task dispatched in a session: its id and goal (never its status)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: SafeText = Field(min_length=1, max_length=128)
    goal: Text = Field(min_length=1, max_length=500)


class _SessionPayload(_Payload):
    # Turns are parsed leniently (a timestamp arrives as ISO text from JSON).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    session_id: SafeText = Field(min_length=1, max_length=128)
    transcript: tuple[Turn, ...] = Field(min_length=1, max_length=MAX_TURNS)

    @model_validator(mode="before")
    @classmethod
    def _transcript_size(cls, data: Any, info: ValidationInfo) -> Any:
        """Refuse an oversized transcript before its turns are validated one by one."""
        return refuse_large_transcript(data, _rules(info).max_transcript_bytes, MAX_TURNS)


class ConsolidateSession(_SessionPayload):
    """Session end: propose bounded patches to USER.md / MEMORY.md from the transcript."""


class DigestSession(_SessionPayload):
    """Session end: keep the topic, a gist of at most 50 characters and the tasks' goals."""

    tasks: tuple[TaskRef, ...] = Field(default=(), max_length=MAX_TASKS)


class RecordTask(_Payload):
    """The gateway reports a task's status to the task ledger."""

    task_id: SafeText = Field(min_length=1, max_length=128)
    goal: RedactedText = Field(min_length=1, max_length=500)
    status: TaskStatus


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
    Annotated[KnowledgeText, Tag("text")] | Annotated[KnowledgePath, Tag("path")]
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


PAYLOADS: dict[str, type[_Payload]] = {
    ACTOR_REMEMBER: RememberSource,
    ACTOR_EXTRACT: ExtractFacts,
    ACTOR_FORGET: ForgetSource,
    ACTOR_CONSOLIDATE: ConsolidateSession,
    ACTOR_DIGEST: DigestSession,
    ACTOR_RECORD_TASK: RecordTask,
    ACTOR_REINDEX: ReindexKnowledge,
}
QUEUE_OF: dict[str, str] = {
    ACTOR_REMEMBER: QUEUE_REMEMBER,
    ACTOR_EXTRACT: QUEUE_EXTRACT,
    ACTOR_FORGET: QUEUE_FORGET,
    ACTOR_CONSOLIDATE: QUEUE_SESSION,
    ACTOR_DIGEST: QUEUE_SESSION,
    ACTOR_RECORD_TASK: QUEUE_TASKS,
    ACTOR_REINDEX: QUEUE_KNOWLEDGE,
}
