"""The L0 blackboard's payload: a session's entries, appended by the gateway.

An entry is what the seeds' blackboard records (time, trust level, priority,
result, evidence references) with its id and its place in the session's event
order (``seq``). Entries are idempotent by ``entry_id`` (the first write wins)
and read back in event order whatever order they arrived in. Every text field
is checked for credentials like every other field (``SafeText``): an append
that carries one is refused whole, at the producer and again at the worker.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memjobs_client.contracts.base import _Payload
from memjobs_client.validation import SafeText

#: Entries one append carries at most.
MAX_BLACKBOARD_APPEND = 100
#: A result's size, in bytes of UTF-8 (an entry is a line of session state, not a document).
MAX_BLACKBOARD_RESULT_BYTES = 64 * 1024
#: Evidence references per entry, and the characters of one.
MAX_BLACKBOARD_EVIDENCE = 64
MAX_BLACKBOARD_REF_CHARS = 512
#: The seeds' three independent limits, per session blackboard: an entry lives 7 days
#: (from its event time), at most 1,000 entries and 8 MB are kept; the oldest go first.
BLACKBOARD_RETENTION_DAYS = 7
BLACKBOARD_MAX_ENTRIES = 1000
BLACKBOARD_MAX_BYTES = 8 * 1024 * 1024


class BlackboardEntry(BaseModel):
    """One entry of a session's blackboard.

    ``seq`` orders the session's events (the gateway's own counter); ``at`` is
    the event's time (timezone-aware; it starts the entry's 7 days). ``trust``
    is the entry's trust level (``runtime``, ``user``, ``model``, ``external``
    …: the gateway's words), ``priority`` an integer, ``result`` the entry's
    text and ``evidence`` references to what backs it (ids, not content).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    entry_id: SafeText = Field(min_length=1, max_length=128)
    seq: int = Field(ge=0, le=2**53)
    at: datetime
    trust: SafeText = Field(min_length=1, max_length=32)
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    kind: SafeText | None = Field(default=None, min_length=1, max_length=64)
    result: SafeText = Field(default="", max_length=MAX_BLACKBOARD_RESULT_BYTES)
    evidence: tuple[SafeText, ...] = Field(default=(), max_length=MAX_BLACKBOARD_EVIDENCE)

    @field_validator("at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("at: needs a timezone (e.g. 2026-12-04T10:00:00Z)")
        return value

    @field_validator("result")
    @classmethod
    def _result_bytes(cls, value: str) -> str:
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > MAX_BLACKBOARD_RESULT_BYTES:
            raise ValueError(f"result: {size} bytes, over the limit of {MAX_BLACKBOARD_RESULT_BYTES}")
        return value

    @field_validator("evidence")
    @classmethod
    def _refs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for ref in value:
            if not ref or len(ref) > MAX_BLACKBOARD_REF_CHARS:
                raise ValueError(f"evidence: each reference 1 to {MAX_BLACKBOARD_REF_CHARS} characters")
        return value

    def size_bytes(self) -> int:
        """What the entry counts against the 8 MB: its JSON, in bytes of UTF-8."""
        return len(canonical_json(self.model_dump(mode="json")).encode("utf-8", "surrogatepass"))


def canonical_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


class AppendBlackboard(_Payload):
    """The gateway appends entries to a session's blackboard (idempotent by entry id)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    session_id: SafeText = Field(min_length=1, max_length=128)
    entries: tuple[BlackboardEntry, ...] = Field(min_length=1, max_length=MAX_BLACKBOARD_APPEND)
