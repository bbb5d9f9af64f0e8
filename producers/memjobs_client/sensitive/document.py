"""A Markdown document checked whole: :func:`find_sensitive_document`.

Why (issue 31, item 3): the memory documents (USER.md, MEMORY.md) grow by
appends and replacements of a line or two, and checking only the added text
let a secret in split across edits: ``- 我的银行卡密码是`` in one append, ``- 739164``
in the next. Each half is clean; the document is not. So the memory service
checks the document an edit would produce, and consolidation checks the
documents before it sends them to a model.

How: the document is checked as it is, and once more with each line that
ends as a disclosure starts (a connector such as "is", ":" or 是, or a
credential's noun such as "password" or 密码) joined to the next line (its
list marker, quote or heading mark dropped), so that the keyword ending one
line and the value opening the next are read as one sentence; the second pass
reads only the lines so joined, and of them only the 256 characters each side
of a join (the rest of each line the first pass read as it is). Both passes
are linear. Not found: a secret split over lines that are not next to each
other, or after a line that ends otherwise (a heuristic, like the rest).
"""

from __future__ import annotations

import re

from memjobs_client.sensitive.content import TEXT_RULES, find_sensitive_text
from memjobs_client.sensitive.normalize import normalise
from memjobs_client.sensitive.rules import Finding

# A line that ends as a disclosure starts (a connector: "is", ":", "=", 是, 为 …, or
# a credential's noun: password, PIN, code, key, number, 密码, 口令, 码, 号), then the
# line break, blank lines, and what opens the next line in Markdown: indentation,
# a list marker ("-", "*", "+", "1.", "1)", "- [ ]"), a quote or a heading.
# Other line breaks stay: "- … using 138591 tokens" above "- max_tokens=4759"
# is two facts, not a token and its value.
_LINE_JOIN = re.compile(
    r"(?P<trail>(?i:\b(?:is|are|was|were|be|to|as|password|passcode|passphrase|pin|code|key|number|no)"
    r")|[:：=→]|->|是|为|為|成|密码|密碼|口令|码|碼|号|號)"
    r"[ \t]*+(?:\r?\n[ \t]*+)++(?:(?:[-*+]|\d{1,9}[.)]|>|#{1,6})[ \t]++(?:\[[ xX]\][ \t]++)?+)?+"
)


def joined_lines(text: str) -> str:
    """The lines of ``text`` that end as a disclosure starts, each joined to the
    next by one space (the next line's Markdown marker dropped); the lines
    joined to none are left out (the first pass read them)."""
    return _joined(text)[0]


def _joined(text: str) -> tuple[str, list[int]]:
    """:func:`joined_lines`, and where each join's space is in it."""
    # A NUL marks a join (a document holds none: the doors refuse it as text).
    start, end = _join_reach(text)
    marked = text[:start] + _LINE_JOIN.sub("\\g<trail>\0", text[start:end]) + text[end:]
    kept = "\n".join(line for line in marked.split("\n") if "\0" in line)
    return kept.replace("\0", " "), [m.start() for m in _NUL.finditer(kept)]


#: The longest a join's trail is ("passphrase").
_TRAIL_MOST = 10
# What can follow a document's last line break in a join, or more: spaces and
# tabs, a Markdown marker and a checkbox (:data:`_LINE_JOIN`'s end, not possessive).
_AFTER_LAST_BREAK = re.compile(r"[ \t]*(?:(?:[-*+]|\d{1,9}[.)]|>|#{1,6})[ \t]*(?:\[[ xX]\][ \t]*)?)?")


def _join_reach(text: str) -> tuple[int, int]:
    """The part of ``text`` in which every join lies: from two characters
    before the longest trail can start (the character before it is read) up to
    the first line break, to one after what can follow the last. Each join
    holds a line break, after at most a trail and spaces (issue 31: a
    document of one long line after a few short ones was tried for a join at
    each of its characters, 0.1 s a megabyte)."""
    first, last = text.find("\n"), text.rfind("\n")
    if first < 0:
        return 0, 0
    start = max(0, len(text[:first].rstrip(" \t\r")) - _TRAIL_MOST - 2)
    after = _AFTER_LAST_BREAK.match(text, last + 1)
    assert after is not None  # it matches the empty string
    return start, min(len(text), after.end() + 1)


_NUL = re.compile("\0")
#: Characters each side of a join in which a secret split by it is looked for,
#: in a window twice as wide (the context the rules read).
_JOIN_REACH = 256


def _windows(joined: str, joins: list[int]) -> list[tuple[int, int, int, int]]:
    """``(start, end, keep_start, keep_end)`` around each join, merged where they overlap."""
    windows: list[tuple[int, int, int, int]] = []
    for at in joins:
        keep_start, keep_end = at - _JOIN_REACH, at + 1 + _JOIN_REACH
        start, end = max(0, keep_start - _JOIN_REACH), min(len(joined), keep_end + _JOIN_REACH)
        if windows and start <= windows[-1][1]:
            windows[-1] = (windows[-1][0], end, windows[-1][2], keep_end)
        else:
            windows.append((start, end, keep_start, keep_end))
    return windows


def _split_secret(joined: str, joins: list[int]) -> Finding | None:
    """The first content rule that matches ``joined`` within :data:`_JOIN_REACH`
    characters of a join, or ``None``. Only there: the rest of each line was read
    as it is by the first pass, which found nothing (issue 31: a document whose
    every line ends in a connector was read twice whole)."""
    first = len(TEXT_RULES)
    for start, end, keep_start, keep_end in _windows(joined, joins):
        normalised = normalise(joined[start:end])
        low, high = keep_start - start, keep_end - start  # the keep window, in the window
        for index in range(first):
            spans = TEXT_RULES[index].scan(normalised.text)
            if any(b > low and a < high for a, b in (normalised.orig_span(*span) for span in spans)):
                first = index
                break
    return None if first == len(TEXT_RULES) else Finding(TEXT_RULES[first].rule, TEXT_RULES[first].description)


def find_sensitive_document(text: str) -> Finding | None:
    """The first content rule a Markdown document matches, read line by line or
    with its lines joined (a secret split over two lines), or ``None``."""
    if not text:
        return None
    found = find_sensitive_text(text)
    if found is not None or "\n" not in text:
        return found
    joined, joins = _joined(text)
    return _split_secret(joined, joins) if joined else None
