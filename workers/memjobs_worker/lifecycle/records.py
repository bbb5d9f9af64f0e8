"""The export's format: a header line, then one JSON object per line, each
with its ``type`` (docs/data-lifecycle.md lists every field).

The models here both write the export and check an import: a record that
does not fit is refused with the line it is on, before anything is written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from memjobs_client.contracts import RememberSource
from memjobs_client.payloads import build_payload
from memjobs_client.validation import refuse_sensitive
from memjobs_worker.lifecycle.parts import Record

#: The header's ``format``, and the newest ``version`` this code writes and reads.
FORMAT = "memjobs-owner-export"
VERSION = 1

#: Text an import takes in, checked for credentials: an import is an ingest path, so
#: it gets the one credential check (SensitiveContent) a remembered source's text
#: gets; documents get it from the memory service.
CheckedText = Annotated[str, AfterValidator(refuse_sensitive)]


class _Record(BaseModel):
    # Extra fields are ignored: a later version 1 writer may add one.
    model_config = ConfigDict(extra="ignore")

    def record(self) -> Record:
        return self.model_dump(mode="json")


class Header(_Record):
    format: Literal["memjobs-owner-export"] = "memjobs-owner-export"
    version: int = Field(default=VERSION, ge=1)
    exported_at: datetime
    owner_id: str = Field(min_length=1)
    owner_key: str = Field(pattern=r"^[0-9a-f]{64}$")


class SourceRecordOut(_Record):
    type: Literal["source"] = "source"
    source_id: str = Field(pattern=r"^src_[0-9a-f]{32}$")
    state: Literal["pending", "learned", "forgotten", "failed"]
    kind: Literal["utterance", "explicit"] = "utterance"
    session_id: str | None = None
    text: str | None = None
    created_at: datetime
    updated_at: datetime
    learned_at: datetime | None = None
    forgotten_at: datetime | None = None
    reason: str | None = None

    def row(self, owner_key: str, source_id: str) -> Record:
        """The ledger row of this source for ``owner_key`` under ``source_id``.

        Raises:
            SensitiveContent: the text looks like a credential.
            InvalidPayload: the text is blank or too long, or a forgotten source has text.
        """
        if self.text is not None:
            # The rules every remembered source passed (length, credentials).
            build_payload(
                RememberSource,
                owner_key=owner_key,
                source_id=source_id,
                text=self.text,
                kind=self.kind,
                session_id=self.session_id,
            )
        values = self.model_dump(exclude={"type"})
        values.update(owner_key=owner_key, source_id=source_id, message_id=None)
        if self.state == "forgotten":
            values["text"] = None
        return values


class MemoryRecordOut(_Record):
    type: Literal["memory"] = "memory"
    memory_id: str
    text: CheckedText = Field(min_length=1)
    source_ids: list[str]


class DocumentRecordOut(_Record):
    type: Literal["memory_document"] = "memory_document"
    doc: Literal["USER.md", "MEMORY.md"]
    content: str
    version: int


class DigestRecordOut(_Record):
    type: Literal["digest"] = "digest"
    session_id: str = Field(min_length=1)
    topic: CheckedText
    gist: CheckedText
    task_goals: list[dict[str, Any]]
    created_at: datetime


class TaskRecordOut(_Record):
    type: Literal["task"] = "task"
    task_id: str = Field(min_length=1)
    goal: CheckedText
    status: Literal["dispatched", "running", "succeeded", "failed", "cancelled"]
    updated_at: datetime
    terminal_at: datetime | None = None


class KnowledgeDocumentOut(_Record):
    type: Literal["knowledge_document"] = "knowledge_document"
    doc_id: str = Field(min_length=1)
    title: str
    source_label: str
    content_hash: str | None = None
    state: Literal["indexed", "refused"]
    reason: str | None = None
    chars: int
    updated_at: datetime
    chunks: list[ChunkOut] = []


class ChunkOut(BaseModel):
    """One chunk of a :class:`KnowledgeDocumentOut`."""

    model_config = ConfigDict(extra="ignore")
    index: int = Field(ge=0)
    text: CheckedText
    chunk_hash: str


class AuditRecordOut(_Record):
    type: Literal["audit"] = "audit"
    at: datetime | None
    doc: str
    op: str
    applied: bool
    reason: str | None = None
    version: int | None = None
    source: str
    session: str | None = None
    turn: str | None = None
    trace: str | None = None
