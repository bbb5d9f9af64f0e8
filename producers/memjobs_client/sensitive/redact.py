"""Blank the secret values out of text that must still reach a model.

How: every content rule is run over the whole text once, and each secret found
is replaced by :data:`REDACTED`. A replacement can, rarely, expose another
match (a hex run cut short by the secret before it now reads whole; a match
that an overlapping one hid), so the text is read again, but only around what
was blanked out: :data:`_REACH` characters each side are judged, with as many
again read around them for context (issue 31: reading the whole text again
doubled redaction's cost). Up to four rounds.
"""

from __future__ import annotations

from itertools import accumulate, chain, compress, count, pairwise, repeat, starmap
from operator import add, lt, sub

from memjobs_client.sensitive.content import TEXT_RULES
from memjobs_client.sensitive.normalize import normalise
from memjobs_client.sensitive.rules import MARKER

REDACTED = MARKER
"""What :func:`redact_secrets` puts in place of each secret value."""

#: Characters each side of a replacement in which a match it exposed is looked
#: for, in a window twice as wide (the context the rules read, up to a keyword's
#: 256-character value, lies inside it).
_REACH = 256

#: A part of the text to read: ``(start, end)``, and the part of it whose
#: matches count, ``(keep_start, keep_end)``.
_Window = tuple[int, int, int, int]


def _found(text: str, windows: list[_Window], again: bool = False) -> list[tuple[int, int]]:
    """The secrets the content rules find in ``windows`` of ``text``, as spans
    of ``text``, merged where they overlap or touch. ``again``: a later round,
    in which a rule that says what a marker can wake
    (:attr:`~memjobs_client.sensitive.rules.TextRule.wakes`) is run over a
    window only where that is found in it."""
    spans: list[tuple[int, int]] = []
    for start, end, keep_start, keep_end in windows:
        normalised = normalise(text[start:end])
        found: list[tuple[int, int]] = []
        for rule in TEXT_RULES:
            if again and rule.wakes is not None and rule.wakes.search(normalised.text) is None:
                continue
            found += rule.scan(normalised.text)  # no Python step per span: a text of secrets has thousands
        if (
            start == 0
            and keep_start <= 0
            and keep_end >= end
            and normalised.offsets_hold
            and all(starmap(lt, found))  # (the rules' spans are never empty: the check is cheap)
        ):
            spans += found  # the whole text, read as it is: each span is kept, where it is
            continue
        for s, e in found:
            a, b = normalised.orig_span(s, e)
            if start + b > keep_start and start + a < keep_end:
                spans.append((start + a, start + b))
    merged: list[tuple[int, int]] = []
    for s, e in sorted(set(spans)):  # a secret two rules find is one span
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def _around(replaced: list[int], size: int) -> list[_Window]:
    """Windows around each replacement starting at an offset of ``replaced``
    (in order) in a text of ``size`` characters, merged where they overlap:
    where two replacements are further apart than two windows' width, one
    window ends and the next begins (found by the C library: a text of
    secrets has thousands of replacements, and one window)."""
    width = len(REDACTED)
    apart = map(lt, repeat(4 * _REACH + width), map(sub, replaced[1:], replaced))
    firsts = [0, *compress(count(1), apart), len(replaced)]
    windows: list[_Window] = []
    for first, after in pairwise(firsts):
        low, high = replaced[first], replaced[after - 1]
        windows.append(
            (max(0, low - 2 * _REACH), min(size, high + width + 2 * _REACH), low - _REACH, high + width + _REACH)
        )
    return windows


def _replaced(text: str, merged: list[tuple[int, int]]) -> tuple[str, list[int]]:
    """``text`` with each span of ``merged`` (in order, apart) replaced by
    :data:`REDACTED`, and where each replacement starts in it; by the C
    library, no Python step per span."""
    starts, ends = zip(*merged, strict=True)
    kept = map(text.__getitem__, map(slice, chain((0,), ends), chain(starts, (None,))))
    # Each replacement starts after the text kept before it and the replacements before.
    steps = map(add, map(sub, starts, chain((0,), ends)), chain((0,), repeat(len(REDACTED))))
    return REDACTED.join(kept), list(accumulate(steps))


def redact_secrets(text: str) -> str:
    """``text`` with each secret value matched by a content rule replaced by
    ``[REDACTED]``; the words around it (and the keyword, e.g. "password is")
    are kept, and characters outside the secrets are left exactly as they were.
    """
    if not text:
        return text
    windows: list[_Window] = [(0, len(text), 0, len(text))]
    for round_ in range(4):  # a replacement could expose another match
        merged = _found(text, windows, again=round_ > 0)
        if not merged:
            return text
        redacted, replaced = _replaced(text, merged)  # where each replacement starts in the new text
        if redacted == text:
            return text
        text = redacted
        windows = _around(replaced, len(text))
    return text
