"""What the memory service answers: one edit, the outcome of a patch, a turn's one result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memjobs_client.errors import InvalidPayload, SensitiveContent
from memjobs_worker.sessions.memory_docs.patches import Reason
from memjobs_worker.sessions.memory_docs.protocol import Document

Op = Literal["append", "replace"]


@dataclass(frozen=True)
class Edit:
    """One edit of the memory tool: ``append`` ``text``, or ``replace`` the unique
    ``old_text`` by ``new_text`` (empty: delete it)."""

    op: Op
    doc: str
    text: str | None = None
    old_text: str | None = None
    new_text: str | None = None


@dataclass(frozen=True)
class OpResult:
    """The outcome of one patch.

    ``version`` is the document's version after the patch, or the version the
    refusal was decided on; ``None`` when it was refused before reading.
    ``reason`` is ``None`` exactly when ``applied``.
    """

    applied: bool
    doc: str
    version: int | None
    reason: Reason | None = None

    def raise_for_refusal(self) -> None:
        """Raise the error matching a refusal; no-op when applied or a duplicate.

        Raises:
            SensitiveContent: reason ``sensitive_content``.
            InvalidPayload: any other refusal (its ``reason`` is the code).
        """
        if self.applied or self.reason in (None, "duplicate"):
            return
        if self.reason == "sensitive_content":
            raise SensitiveContent(f"memory patch to {self.doc} refused: it looks like a credential")
        raise InvalidPayload(f"memory patch refused: {self.reason}", reason=self.reason)


@dataclass(frozen=True)
class EditOutcome:
    """The one result of a turn's edits.

    ``applied``: every edit applied (or already there: ``duplicate``), and
    ``changed`` documents written; ``documents``: the touched documents as they
    are now. Otherwise ``failed`` is the index of the edit that stopped the turn
    and ``reason`` why; nothing of the turn was written.
    """

    applied: bool
    results: tuple[OpResult, ...]
    changed: int = 0
    documents: tuple[Document, ...] = ()
    failed: int | None = None
    reason: Reason | None = None


def refused(edits: list[Edit], index: int, reason: Reason, version: int | None) -> EditOutcome:
    """The outcome of a turn one edit refused: nothing applied; ``version`` is that edit's."""
    results = tuple(
        OpResult(False, e.doc, version if i == index else None, reason if i == index else None)
        for i, e in enumerate(edits)
    )
    return EditOutcome(False, results, failed=index, reason=reason)
