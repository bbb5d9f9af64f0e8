"""Request and response bodies of the HTTP API (they make the OpenAPI document).

Nested job parts are the contract models themselves (:class:`~memjobs_client.contracts.Turn`,
``TaskRef``, ``KnowledgeText``), so the HTTP door and the Python producer
accept exactly the same jobs; the client re-validates the whole payload before
anything is enqueued. Every request also refuses NUL bytes and unpaired UTF-16
surrogates anywhere in its strings (neither survives PostgreSQL or UTF-8), by
the client's own check (:func:`~memjobs_client.validation.text_problem`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from memjobs_client import contracts
from memjobs_client.contracts import (
    DEFAULT_MAX_KNOWLEDGE_DOC_CHARS,
    MAX_CORPUS_DOCUMENTS,
    MAX_TASKS,
    MAX_TURNS,
    TaskRef,
    Turn,
)
from memjobs_client.validation import SafeText, Text, refuse_sensitive, text_problem

OwnerId = Field(
    min_length=1, max_length=256, description="the owner, named by the gateway; stored and logged only as its sha256"
)
SOURCE_ID_PATTERN = r"^src_[0-9a-f]{32}$"
#: The largest id or sequence number a page may start after: PostgreSQL's bigint (a
#: larger one is a 422, not a database error).
BIGINT_MAX = 2**63 - 1


def _bad_char(value: Any) -> bool:
    if isinstance(value, str):
        return text_problem(value) is not None
    if isinstance(value, dict):
        return any(_bad_char(k) or _bad_char(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_bad_char(v) for v in value)
    return False


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_nul_or_surrogate(cls, data: Any) -> Any:
        if _bad_char(data):
            raise ValueError("strings must not contain NUL bytes or unpaired surrogates")
        return data


class RememberRequest(_Request):
    owner_id: str = OwnerId
    text: str = Field(min_length=1, description="a user turn or an explicit 'remember this'")
    session_id: SafeText | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="refused when it looks like a credential, as every id is",
    )
    kind: Literal["utterance", "explicit"] = "utterance"


class ForgetRequest(_Request):
    owner_id: str = OwnerId
    source_id: str = Field(pattern=SOURCE_ID_PATTERN)


class RecallRequest(_Request):
    owner_id: str = OwnerId
    query: str = Field(min_length=1, max_length=2000)
    limit: int = Field(default=5, ge=1, le=50)


class EndSessionRequest(_Request):
    owner_id: str = OwnerId
    transcript: list[Turn] = Field(min_length=1, max_length=MAX_TURNS)
    tasks: list[TaskRef] = Field(default_factory=list, max_length=MAX_TASKS)
    consolidate: bool = Field(
        default=True,
        description=(
            "queue consolidation (default: the workers decide with their own settings); false opts this session out"
        ),
    )
    digest: bool = Field(
        default=True,
        description=(
            "queue the digest (default: the workers run it when QWEN_AUDIO_SESSION_DIGEST=on); "
            "false opts this session out"
        ),
    )


class TaskUpdate(_Request):
    owner_id: str = OwnerId
    goal: str = Field(min_length=1, max_length=500)
    status: Literal["dispatched", "running", "succeeded", "failed", "cancelled"]


class KnowledgeText(contracts.KnowledgeText):
    """A document the host hands over as text."""

    # The contract's fields without their credential check: FastAPI validates a body on
    # the event loop, and a megabyte of documents took seconds to scan there. The
    # route checks them off the loop; the client checks them again before enqueueing.
    doc_id: Text = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@/-]+$")
    title: Text = Field(min_length=1, max_length=300)
    text: Text = Field(max_length=DEFAULT_MAX_KNOWLEDGE_DOC_CHARS)


class ReindexRequest(_Request):
    owner_id: str = OwnerId
    consent: bool = Field(
        description="the user consents to sending the documents' text to the "
        "embedding service; false is refused with consent_required"
    )
    documents: list[KnowledgeText] = Field(max_length=MAX_CORPUS_DOCUMENTS, description="the owner's whole corpus")


class KnowledgeSearchRequest(_Request):
    owner_id: str = OwnerId
    query: str = Field(min_length=1, max_length=2000)
    k: int = Field(default=5, ge=1, le=20)


# -- responses -------------------------------------------------------------------------


class Problem(BaseModel):
    """RFC 9457 problem details; branch on ``type`` (or ``reason``), never on ``detail``."""

    type: str
    title: str
    status: int
    reason: str
    detail: str | None = None


class RememberAccepted(BaseModel):
    source_id: str = Field(pattern=SOURCE_ID_PATTERN)
    status: Literal["queued"]


class ForgetAccepted(BaseModel):
    source_id: str
    status: Literal["forgotten", "already_forgotten"] = Field(
        description="forgotten now (or before: already_forgotten); a source the owner does "
        "not have is a not_found problem"
    )
    purge: Literal["queued"]


class Memory(BaseModel):
    memory_id: str
    text: str
    score: float | None
    source_ids: list[str]


class Memories(BaseModel):
    memories: list[Memory]
    truncated: bool = False


class Preferences(BaseModel):
    doc: Literal["USER.md"]
    version: int = Field(ge=0, description="0: never written")
    content: str


class SessionEndAccepted(BaseModel):
    session_id: str
    status: Literal["queued", "already_ended"] = Field(
        description=(
            "queued: this request queued jobs; already_ended: every job it asked for was "
            "queued by an earlier end of the same session"
        )
    )
    enqueued: list[str] = Field(
        description=("the jobs this request queued: consolidate_session, digest_session, extract_facts")
    )
    opted_out: list[str] = Field(
        default_factory=list, description=("the jobs this request opted out of (a later end may still queue them)")
    )


class RecalledTaskOut(BaseModel):
    task_id: str
    goal: str
    status: str
    status_known: bool


class SessionDigest(BaseModel):
    session_id: str
    created_at: datetime
    topic: str
    gist: str
    tasks: list[RecalledTaskOut]


class Sessions(BaseModel):
    sessions: list[SessionDigest]
    truncated: bool


class TaskAccepted(BaseModel):
    task_id: str
    status: Literal["queued"]


class ReindexAccepted(BaseModel):
    documents: int
    status: Literal["queued"]


class KnowledgeHit(BaseModel):
    text: str
    score: float
    title: str
    source: str
    trust: Literal["untrusted_external"]


class KnowledgeResults(BaseModel):
    mode: Literal["hybrid", "keyword"]
    notice: str | None
    results: list[KnowledgeHit]


class SourceOut(BaseModel):
    source_id: str
    state: Literal["pending", "learned", "forgotten", "failed"]
    kind: str
    session_id: str | None
    created_at: datetime
    learned_at: datetime | None
    reason: str | None = Field(
        default=None, description="why the source is failed (e.g. model_output_invalid: …); null in every other state"
    )
    text: str | None = Field(default=None, description="only with include_text=true")


class Sources(BaseModel):
    sources: list[SourceOut]
    truncated: bool


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    """Status degraded: ready (remembers are taken and kept pending), but a model
    service's circuit breaker is open, so nothing is learned until it returns."""

    status: Literal["ready", "degraded"]
    redis: Literal["ok"]
    state_store: Literal["ok"]
    #: Each model service's circuit breaker (``chat``, ``embed``).
    models: dict[str, Literal["closed", "open"]]


# -- the memory tool (USER.md / MEMORY.md): routes/memory_docs.py -------------------------

#: Text without control characters, as session ids are ("s/1 é" included).
CONTEXT_ID = r"^[^\x00-\x1f\x7f]{1,128}$"
#: An id of the gateway's, kept in the audit trail: refused when it looks like a
#: credential, as every id is.
ContextId = Annotated[str, Field(pattern=CONTEXT_ID), AfterValidator(refuse_sensitive)]


class MemoryDocument(BaseModel):
    doc: Literal["USER.md", "MEMORY.md"]
    scope: Literal["user", "memory"]
    content: str
    version: int = Field(ge=0, description="0: never written; each write adds one")


class MemoryProviderInfo(BaseModel):
    """The memory provider's ``describe()``, in the seeds' names."""

    protocolVersion: int  # noqa: N815 - the seeds' name on the wire
    key: str
    label: str


class MemoryDocuments(BaseModel):
    documents: list[MemoryDocument]
    provider: MemoryProviderInfo | None = None


class MemoryEdit(_Request):
    op: Literal["append", "replace"]
    doc: str = Field(
        min_length=1,
        max_length=64,
        description="USER.md or MEMORY.md; anything else (ASSISTANT.md included) is refused as forbidden_document",
    )
    text: str | None = Field(default=None, max_length=20_000, description="append: the Markdown to add on its own line")
    old_text: str | None = Field(
        default=None, max_length=20_000, description="replace: text that occurs exactly once in the document"
    )
    new_text: str | None = Field(
        default=None,
        max_length=20_000,
        description="replace: its replacement; empty or absent deletes it (with its line)",
    )

    @model_validator(mode="after")
    def _fields_of_op(self) -> MemoryEdit:
        if self.op == "append" and (self.text is None or self.old_text is not None or self.new_text is not None):
            raise ValueError("append takes text (and no old_text or new_text)")
        if self.op == "replace" and (self.old_text is None or self.text is not None):
            raise ValueError("replace takes old_text and new_text (and no text)")
        return self


class MemoryContext(_Request):
    """Who asks, as the gateway knows it (never the model): kept in the audit trail."""

    source: str = Field(default="memory_tool", pattern=r"^[a-z][a-z0-9_.-]{0,39}$")
    session: ContextId | None = None
    turn: ContextId | None = None
    trace: ContextId | None = None


class MemoryEditsRequest(_Request):
    owner_id: str = OwnerId
    edits: list[MemoryEdit] = Field(
        min_length=1, max_length=20, description="one turn's edits, applied in order, all or none"
    )
    context: MemoryContext = Field(default_factory=MemoryContext)


class MemoryEditResult(BaseModel):
    op: Literal["append", "replace"]
    doc: str
    applied: bool
    reason: Literal["duplicate"] | None = Field(description="duplicate: already there, nothing to do")
    version: int | None


class MemoryEditsApplied(BaseModel):
    changed: int = Field(description="documents written")
    edits: list[MemoryEditResult]
    documents: list[MemoryDocument] = Field(description="the written documents as they are now")


class MemoryAuditEntry(BaseModel):
    id: int
    at: datetime
    owner_key: str = Field(description="sha256 of the owner id; never the id")
    doc: str
    op: str
    applied: bool
    reason: str | None
    version: int | None
    source: str
    session: str | None
    turn: str | None
    trace: str | None
    host: str | None
    pid: int | None


class MemoryAudit(BaseModel):
    entries: list[MemoryAuditEntry]
    next_before_id: int | None = Field(description="pass as before_id for older entries")


class BlackboardEntry(_Request):
    """An entry of a session's L0 blackboard (the contract's fields; the credential
    check runs off the event loop, as for knowledge documents)."""

    entry_id: str = Field(min_length=1, max_length=128, description="idempotency: one entry per id")
    seq: int = Field(ge=0, le=2**53, description="the session's event order")
    at: datetime = Field(description="the event's time, with its timezone (starts its 7 days)")
    trust: str = Field(min_length=1, max_length=32, description="trust level: runtime, user, model …")
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    kind: str | None = Field(default=None, min_length=1, max_length=64)
    result: str = Field(default="", max_length=contracts.MAX_BLACKBOARD_RESULT_BYTES)
    evidence: list[str] = Field(
        default_factory=list,
        max_length=contracts.MAX_BLACKBOARD_EVIDENCE,
        description="references to what backs the entry (ids, not content)",
    )


class BlackboardAppendRequest(_Request):
    owner_id: str = OwnerId
    entries: list[BlackboardEntry] = Field(min_length=1, max_length=contracts.MAX_BLACKBOARD_APPEND)


class BlackboardAppended(BaseModel):
    session_id: str
    entries: int = Field(description="the entries queued (an entry already stored changes nothing)")
    status: Literal["queued"]


class BlackboardCursor(BaseModel):
    seq: int
    entry_id: str


class BlackboardPage(BaseModel):
    session_id: str
    entries: list[BlackboardEntry] = Field(description="in event order (seq, then entry id)")
    next_after: BlackboardCursor | None = Field(
        description=("pass as after_seq and after_id for the next page; null on the last")
    )


REQUEST_MODELS: tuple[type[BaseModel], ...] = (
    RememberRequest,
    ForgetRequest,
    RecallRequest,
    EndSessionRequest,
    TaskUpdate,
    ReindexRequest,
    KnowledgeSearchRequest,
    Turn,
    TaskRef,
    KnowledgeText,
    MemoryEditsRequest,
    MemoryEdit,
    MemoryContext,
    BlackboardAppendRequest,
    BlackboardEntry,
)


def known_fields() -> frozenset[str]:
    """Every field name a request may carry (validation details name only these)."""
    return frozenset(name for model in REQUEST_MODELS for name in model.model_fields)
