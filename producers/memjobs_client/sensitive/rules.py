"""What every content rule is made of, and what a match reports.

A rule is a :class:`TextRule`: a rule id, a description and a :data:`Scanner`
that yields the span of each secret value it finds in normalised text.  A
match is reported as a :class:`Finding`, which names the rule only, never the
matched text, because the matched text is the secret.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """Which rule matched.  Never carries the matched text: that is the secret."""

    rule: str
    description: str = ""

    def __str__(self) -> str:
        return f"{self.rule} ({self.description})" if self.description else self.rule


Scanner = Callable[[str], Iterator[tuple[int, int]]]
"""Yields the ``(start, end)`` span of each secret value in normalised text."""


@dataclass(frozen=True)
class TextRule:
    """A content rule: its id, what it looks for and how to scan for it."""

    rule: str
    description: str
    scan: Scanner
    shape: bool  # a token shape: also looked for inside paths
    #: What a redaction's later rounds (:mod:`~memjobs_client.sensitive.redact`)
    #: look for before running the rule again: something every match that a
    #: marker can have exposed holds (:func:`touching_marker`). None: the rule
    #: is run again wherever a marker was put.
    wakes: re.Pattern[str] | None = None


MARKER = "[REDACTED]"
"""What a redaction puts in place of each secret value."""


def touching_marker(*runs: tuple[str, int]) -> re.Pattern[str]:
    """A pattern found at a :data:`MARKER` with, right before or right after
    it, ``least`` characters of a class ``chars``, for one of ``runs``.

    For a rule whose every match is made of the characters of a class that
    holds neither bracket of the marker, and is judged by what lies in the
    longest run of them around it (the characters that end the run are never
    of the class, whichever they are): a run that touches no marker is as it
    was before the markers were put, so it holds the matches it held then
    (each blanked out already, or none); a new match lies in a run that
    touches a marker, and is ``least`` characters long at least. Searched for
    by the marker, a literal: a text with a marker every few words costs a
    few steps per marker, not a scan of the rule."""
    marker = re.escape(MARKER)
    before = "|".join(f"(?<=[{chars}]{{{least}}}{marker})" for chars, least in runs)
    after = "|".join(f"[{chars}]{{{least}}}" for chars, least in runs)
    return re.compile(f"{marker}(?:{before}|(?={after}))")


def regex_scanner(
    pattern: str,
    flags: int = 0,
    *,
    accept: Callable[[re.Match[str]], bool] | None = None,
    lead: str | None = None,
) -> Scanner:
    """A scanner yielding, per hit, the span of the first group named
    ``secret…`` that took part in the match (alternatives may each name one:
    ``secret``, ``secret2``, ...), or the whole match when none did.

    ``lead``: a pattern that matches, in bounded time, wherever ``pattern`` can
    begin (the literal prefixes after the look-behind it opens with, say). The
    regular expression engine skips ahead fast to where a pattern's literal
    first characters occur ("AKIA", "ghp_"), but not past a look-behind: it
    tries one at every position. So the lead is searched for, and ``pattern``
    tried only where it is found; the matches are those of ``finditer``."""
    compiled = re.compile(pattern, flags)
    span_of = _secret_span(compiled, accept)

    def scan(text: str) -> Iterator[tuple[int, int]]:
        for match in compiled.finditer(text):
            span = span_of(match)
            if span is not None:
                yield span

    if lead is None:
        return scan
    leads = re.compile(lead, flags)

    def led(text: str) -> Iterator[tuple[int, int]]:
        pos = 0
        while (found := leads.search(text, pos)) is not None:
            at = found.start()
            match = compiled.match(text, at)
            if match is None:
                pos = at + 1
                continue
            pos = max(match.end(), at + 1)
            span = span_of(match)
            if span is not None:
                yield span

    return led


def _secret_span(
    compiled: re.Pattern[str],
    accept: Callable[[re.Match[str]], bool] | None,
) -> Callable[[re.Match[str]], tuple[int, int] | None]:
    """A match's hit, as the scanners yield it: the span of its first ``secret…``
    group that took part (or the whole match); None when ``accept`` refuses the
    match or the span is empty."""
    groups = [name for name in compiled.groupindex if name.startswith("secret")]

    def span_of(match: re.Match[str]) -> tuple[int, int] | None:
        if accept is not None and not accept(match):
            return None
        start, end = match.span()
        for group in groups:  # a loop, not a generator: one step per secret of a text of them
            if match.group(group) is not None:
                start, end = match.span(group)
                break
        return (start, end) if end > start else None

    return span_of


def anchored_scanner(
    pattern: str,
    starts: Callable[[str], Iterable[int]],
    *,
    slack: int,
    accept: Callable[[re.Match[str]], bool] | None = None,
) -> Scanner:
    """:func:`regex_scanner` for a pattern costly to try at every position (a
    large alternation): it is tried only where ``starts`` says a match can
    begin, found by cheaper patterns. ``starts`` may repeat a position and
    yield one up to ``slack`` characters before one it yielded earlier, no
    further. The matches are those of ``finditer``, provided every position
    where one can begin is among ``starts``: candidates are tried in order,
    the first at or after the last match's end first, as ``finditer`` would;
    and lazily, so that a check stopping at the first match reads no further."""
    compiled = re.compile(pattern)
    span_of = _secret_span(compiled, accept)

    def ordered(text: str) -> Iterator[int]:
        pending: list[int] = []
        last = -1
        for start in starts(text):
            heapq.heappush(pending, start)
            while pending[0] < start - slack:  # nothing later can come before it
                first = heapq.heappop(pending)
                if first > last:
                    last = first
                    yield first
        for first in sorted(pending):
            if first > last:
                last = first
                yield first

    def scan(text: str) -> Iterator[tuple[int, int]]:
        cursor = 0
        for start in ordered(text):
            if start < cursor:
                continue
            match = compiled.match(text, start)
            if match is None:
                continue
            cursor = max(match.end(), start + 1)
            span = span_of(match)
            if span is not None:
                yield span

    return scan


#: Upper-case ASCII letters, and the four other characters that a pattern's
#: ``(?i)`` takes for an ASCII letter (dotted and dotless i, long s, the Kelvin
#: sign), as lower-case ASCII letters; every other character as it is.
_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ\u0130\u0131\u017f\u212a", "abcdefghijklmnopqrstuvwxyziisk")

#: The last text folded and its folding, one tuple (read and replaced whole, so
#: threads never see one text's half with another's). The rules of a check are
#: tried on the same text one after another: it is folded once.
_folded: tuple[str, str] = ("", "")


def folded(text: str) -> str:
    """``text`` with its case folded for ASCII patterns, one character for one
    (offsets hold): an ASCII pattern written in lower case and compiled
    without ``re.IGNORECASE`` matches the folded text where the pattern with
    ``re.IGNORECASE`` matches the text, and runs several times faster (the
    engine skips ahead to literal characters only when case is exact)."""
    global _folded
    last = _folded
    if last[0] is text:
        return last[1]
    fold = text.lower() if text.isascii() else text.translate(_FOLD)
    _folded = (text, fold)
    return fold


def gated(scan: Scanner, *words: str) -> Scanner:
    """``scan``, run only when the folded text (:func:`folded`) holds one of ``words``: a
    substring test is far cheaper than a pattern tried at every position, and
    most text (log lines above all) holds none of a rule's words."""

    # An ASCII text (most) holds none of the other words: each absent word is a
    # search of the whole text.
    ascii_words = tuple(word for word in words if word.isascii())

    def run(text: str) -> Iterator[tuple[int, int]]:
        # The scan's own iterator, not a generator around it: no step per span.
        fold = folded(text)
        for word in ascii_words if fold.isascii() else words:
            if word in fold:
                return scan(text)
        return iter(())

    return run


DIGIT = r"\d"
"""What :func:`needs` looks for before a rule whose every match holds a digit
(cards, identity numbers, codes): the markers a redaction leaves hold none."""

#: The last text searched for each pattern of :func:`needs` and whether it was
#: found, one tuple per pattern (read and replaced whole, as :data:`_folded`):
#: rules that need the same thing of the same text search it once.
_needed: dict[re.Pattern[str], tuple[str, bool]] = {}


def needs(scan: Scanner, *patterns: str) -> Scanner:
    """``scan``, run only when one of ``patterns`` (something every match of
    it holds: a digit, a run of 32 key characters) is found in the text. A
    search by the C library, and a rule that cannot match skipped: above all
    in the second round of a redaction, whose text holds markers where the
    secrets (the digits, the long values) were."""
    compiled = tuple(re.compile(pattern) for pattern in patterns)
    key = compiled[0]

    def run(text: str) -> Iterator[tuple[int, int]]:
        last = _needed.get(key)
        if last is not None and last[0] is text:
            found = last[1]
        else:
            found = any(pattern.search(text) is not None for pattern in compiled)
            _needed[key] = (text, found)
        return scan(text) if found else iter(())

    return run


def scan_first(normalised: str, rules: tuple[TextRule, ...]) -> Finding | None:
    """The first of ``rules`` that matches ``normalised`` text, or ``None``."""
    for rule in rules:
        if next(rule.scan(normalised), None) is not None:
            return Finding(rule.rule, rule.description)
    return None
