"""Blank the secret values out of text that must still reach a model."""

from __future__ import annotations

from memjobs_client.sensitive.content import TEXT_RULES
from memjobs_client.sensitive.normalize import normalise

REDACTED = "[REDACTED]"
"""What :func:`redact_secrets` puts in place of each secret value."""


def redact_secrets(text: str) -> str:
    """``text`` with each secret value matched by a content rule replaced by
    ``[REDACTED]``; the words around it (and the keyword, e.g. "password is")
    are kept, and characters outside the secrets are left exactly as they were.
    """
    for _ in range(4):  # a replacement could, in theory, expose another match
        if not text:
            return text
        normalised = normalise(text)
        spans: list[tuple[int, int]] = []
        for rule in TEXT_RULES:
            spans.extend(rule.scan(normalised.text))
        if not spans:
            return text
        merged: list[tuple[int, int]] = []
        for start, end in sorted(normalised.orig_span(s, e) for s, e in spans):
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        out: list[str] = []
        cursor = 0
        for start, end in merged:
            out.append(text[cursor:start])
            out.append(REDACTED)
            cursor = end
        out.append(text[cursor:])
        redacted = "".join(out)
        if redacted == text:
            return text
        text = redacted
    return text
