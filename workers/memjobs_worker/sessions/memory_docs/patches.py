"""The text of a patch: what an append or a replace makes of a document.

Pure functions, no storage: the service calls them on the document it has just
re-read, under the owner's serialisation, and writes what they return. Each
returns a :class:`Plan`: the whole new content, or the reason for refusing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memjobs_client.sensitive import find_sensitive_text

Reason = Literal["not_found", "ambiguous", "too_long", "forbidden_document", "sensitive_content", "empty", "duplicate"]
#: Why a patch was not applied (``OpResult.reason``).
REASONS: tuple[Reason, ...] = (
    "not_found",
    "ambiguous",
    "too_long",
    "forbidden_document",
    "sensitive_content",
    "empty",
    "duplicate",
)


@dataclass(frozen=True)
class Plan:
    """The new content of the document, or why there is none."""

    content: str | None = None
    reason: Reason | None = None


def plan_append(content: str, body: str, *, max_doc_chars: int) -> Plan:
    """``body`` on its own line(s) after ``content``; a duplicate if already there as whole lines."""
    if has_block(content, body):
        return Plan(reason="duplicate")
    if not content.strip():
        new = body
    else:
        new = content + ("" if content.endswith("\n") else "\n") + body
    return Plan(reason="too_long") if len(new) > max_doc_chars else Plan(new)


def plan_replace(content: str, old_text: str, new_text: str, *, max_doc_chars: int) -> Plan:
    """The unique match of ``old_text`` replaced by ``new_text`` (deleted when empty).

    Refusals: ``not_found`` (or ``duplicate`` when ``new_text`` is already
    there: the patch was applied before), ``ambiguous`` (several matches,
    overlapping ones included), ``too_long`` (the result grows past the bound;
    shortening an over-long document is allowed), ``sensitive_content`` (the
    edited line now discloses a secret, e.g. a password after "password:").
    """
    first = content.find(old_text)
    if first < 0:
        return Plan(reason="duplicate" if new_text and new_text in content else "not_found")
    if content.find(old_text, first + 1) >= 0:
        return Plan(reason="ambiguous")
    if old_text == new_text:
        return Plan(reason="duplicate")
    start, end = first, first + len(old_text)
    if not new_text:
        start, end = widen_to_line(content, start, end)
    new = content[:start] + new_text + content[end:]
    if len(new) > max_doc_chars and len(new) >= len(content):
        return Plan(reason="too_long")
    line_start = new.rfind("\n", 0, start) + 1
    line_end = new.find("\n", start + len(new_text))
    if find_sensitive_text(new[line_start : line_end if line_end >= 0 else len(new)]) is not None:
        return Plan(reason="sensitive_content")
    return Plan(new)


def has_block(content: str, body: str) -> bool:
    """Whether ``body`` occurs in ``content`` as whole lines."""
    start = content.find(body)
    while start >= 0:
        if _whole_lines(content, start, start + len(body)):
            return True
        start = content.find(body, start + 1)
    return False


def widen_to_line(content: str, start: int, end: int) -> tuple[int, int]:
    """Widen a deleted span that is whole lines by one newline, leaving no blank line."""
    if _whole_lines(content, start, end):
        if end < len(content):
            return start, end + 1
        if start > 0:
            return start - 1, end
    return start, end


def _whole_lines(content: str, start: int, end: int) -> bool:
    return (start == 0 or content[start - 1] == "\n") and (end == len(content) or content[end] == "\n")
