"""What every contract shares: the schema version, queue and actor names, the
limits, the source rules (the validation context), owner keys, source ids and
the payload base class."""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from memjobs_client.validation import text_problem

#: The schema version of the messages this code writes, and the newest it reads.
#: Every payload carries its version (``schema_version``; a payload without one is
#: version 1). A worker reads every version up to its own; a message of a newer
#: version is left for a newer worker (requeued with a delay, see
#: ``memjobs_worker.broker.DeferNewerSchema``), never dead-lettered for it. A
#: version is raised only with a change a worker of the version before cannot
#: read, and the workers are upgraded before the producers (docs/operations.md).
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
#: A session's L0 blackboard entries (on the task ledger's cheap queue: milliseconds, no model).
ACTOR_APPEND_BLACKBOARD = "append_blackboard"

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


def current_schema_version() -> int:
    """:data:`SCHEMA_VERSION`, read when called (a test runs a newer contract by
    setting it on this module)."""
    return SCHEMA_VERSION


def schema_version_of(payload: object) -> int | None:
    """The schema version a message's payload says it was written in: 1 when it
    says none (messages from before versions were written); None when it is not
    a whole number ≥ 1 or the payload is not an object (validation refuses it)."""
    if not isinstance(payload, dict):
        return None
    version = payload.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        return None
    return version


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

    schema_version: int = Field(default_factory=current_schema_version)
    owner_key: str = Field(pattern=_HEX64)

    @field_validator("schema_version")
    @classmethod
    def _readable_version(cls, value: int) -> int:
        if not 1 <= value <= current_schema_version():
            raise ValueError(f"schema version {value} is not one this code reads (1 to {current_schema_version()})")
        return value
