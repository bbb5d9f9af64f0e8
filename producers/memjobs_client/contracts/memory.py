"""Personal memory's payloads: remember a source, extract facts, forget a source."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from memjobs_client.contracts.base import _SOURCE_ID, SourceKind, _Payload, _rules, normalize_text
from memjobs_client.validation import SafeText, Text, refuse_sensitive


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
