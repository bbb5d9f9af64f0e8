"""Session end's payloads: consolidate, digest, and the task ledger's reports."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from memjobs_client.contracts.base import (
    DEFAULT_MAX_TRANSCRIPT_BYTES,
    MAX_TASKS,
    MAX_TURNS,
    TaskStatus,
    _Payload,
    _rules,
    owner_key,
)
from memjobs_client.validation import RedactedText, SafeText, Text, refuse_large_transcript


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
    """Session end: propose bounded patches to USER.md / MEMORY.md from the transcript.

    ``owner_id``: the owner id as the producer has it, for a host's memory
    provider, which maps tenants itself and so needs the id, not its sha256
    (it must hash to ``owner_key``). ``None`` in a message queued by an older
    producer: the built-in providers need only the key. Never logged.
    """

    owner_id: str | None = Field(default=None, min_length=1, max_length=800)

    @model_validator(mode="after")
    def _owner_id_matches_key(self) -> ConsolidateSession:
        if self.owner_id is not None and owner_key(self.owner_id) != self.owner_key:
            raise ValueError("owner_id does not hash to owner_key")
        return self


class DigestSession(_SessionPayload):
    """Session end: keep the topic, a gist of at most 50 characters and the tasks' goals."""

    tasks: tuple[TaskRef, ...] = Field(default=(), max_length=MAX_TASKS)


class RecordTask(_Payload):
    """The gateway reports a task's status to the task ledger."""

    task_id: SafeText = Field(min_length=1, max_length=128)
    goal: RedactedText = Field(min_length=1, max_length=500)
    status: TaskStatus
