"""Secrets in disguise: base64 or hex of a known shape, and tokens broken by spaces.

What: :func:`encoded_scanner` decodes base64 (standard or URL-safe) and hex
runs and refuses the run when its decoded text matches a token shape or a
disclosure ("c2stcHJvai0..." is ``sk-proj-...``); :func:`spaced_scanner`
joins the pieces of a token that starts with a vendor prefix and was broken
by spaces or line breaks ("ghp_A1b2 C3d4 E5f6 ...", a key wrapped in a chat
window) and tries the shapes on the joined token; :func:`letter_spaced_scanner`
joins words spelt letter by letter ("p a s s w o r d : h u n t e r 2").

Why only decoded *text* and only prefixed tokens: ordinary hashes, ids and
words decode to binary noise or lack a prefix, so they cost a decode attempt
and pass.
"""

from __future__ import annotations

import base64
import binascii
import re
from bisect import bisect_left
from collections.abc import Callable, Iterator
from functools import partial
from itertools import accumulate, chain, compress, count, repeat
from operator import and_, is_not, ne, or_

from memjobs_client.sensitive.rules import Scanner, touching_marker

Matches = Callable[[str], bool]
"""Whether (decoded or joined) text matches one of the inner rules."""

_B64 = re.compile(r"(?<![A-Za-z0-9+/=_\-])[A-Za-z0-9+/_\-]{16,}={0,2}(?![A-Za-z0-9+/=_\-])")
_HEX = re.compile(r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}[ :]?){10,}(?![0-9A-Fa-f])")
_MAX_DECODE = 64 * 1024
#: A base64 run is a whole run of its characters ("=" too: the look-behind and
#: look-ahead refuse it), 16 at least; a hex one lies in a run of hex digits,
#: spaces and colons, 20 at least, and is judged by that run alone (the
#: characters that end it are not hex digits, whichever they are). A marker's
#: own hex letters ("EDAC") are too few. What a redaction's later round looks
#: for before reading them again (:func:`~memjobs_client.sensitive.rules.touching_marker`).
ENCODED_RUNS = touching_marker((r"A-Za-z0-9+/=_\-", 16), (r"0-9A-Fa-f :", 20))


def _printable(text: str) -> bool:
    if not text:
        return False
    good = sum(1 for c in text if c.isprintable() or c in "\n\r\t")
    return good >= 0.9 * len(text)


def _decode_b64(value: str) -> str | None:
    raw = value.rstrip("=")
    padded = raw + "=" * (-len(raw) % 4)
    try:
        if "-" in raw or "_" in raw:
            data = base64.urlsafe_b64decode(padded)
        else:
            data = base64.b64decode(padded, validate=True)
        text = data.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    return text if _printable(text) else None


def _decode_hex(value: str) -> str | None:
    digits = value.replace(" ", "").replace(":", "")
    try:
        text = bytes.fromhex(digits).decode("utf-8")
    except ValueError:
        return None
    return text if _printable(text) else None


def encoded_scanner(matches: Matches) -> Scanner:
    """Spans of base64 and hex runs whose decoded text ``matches``."""

    def scan(text: str) -> Iterator[tuple[int, int]]:
        for pattern, decode in ((_B64, _decode_b64), (_HEX, _decode_hex)):
            for run in pattern.finditer(text):
                value = run.group().rstrip(" :")
                if len(value) > _MAX_DECODE:
                    continue
                decoded = decode(value)
                if decoded is not None and matches(decoded):
                    yield run.start(), run.start() + len(value)

    return scan


_PREFIX = re.compile(
    r"(?:sk-|sk_live_|rk_live_|sk_test_|whsec_|gh[pousr]_|github_pat_|glpat-|xox[abpores]-"
    r"|AKIA|ASIA|AIza|hf_|npm_|pypi-|SG\.|key-|LTAI|AKID|eyJ|ya29\.|GOCSPX-|dop_v1_|hvs\.|-----BEGIN)"
)
#: A character every prefix of :data:`_PREFIX` holds: a text without one has no
#: prefix, spaces taken out or not (a C search, where taking the spaces out
#: copies the text: a second round over text of secrets and markers, above all).
_PREFIX_MARK = re.compile(r"[\-_.IJ]")
_SPACES = re.compile(r"\s+|\\n")
_FRAGMENT = re.compile(r"[A-Za-z0-9_\-+/=.]+")
_MAX_FRAGMENTS = 24


_DIGIT, _UPPER, _LOWER = re.compile("[0-9]"), re.compile("[A-Z]"), re.compile("[a-z]")


def _tokenish(fragment: str) -> bool:
    """A piece of a random token rather than a word: a digit, or mixed case
    (fragments are ASCII: :data:`_FRAGMENT`)."""
    return _DIGIT.search(fragment) is not None or (
        _UPPER.search(fragment) is not None and _LOWER.search(fragment) is not None
    )


def _chain(pieces: list[str], tokenish: Callable[[int], bool]) -> int:
    """How many of ``pieces`` form one broken-up token: pieces as long as the
    second one (a wrapped or grouped token) or random-looking ones
    (``tokenish(i)`` says whether piece ``i`` is), with at least half of them
    random-looking."""
    width = len(pieces[1])
    count = 1
    for i in range(1, min(len(pieces), _MAX_FRAGMENTS)):
        if len(pieces[i]) != width and not tokenish(i):
            break
        count += 1
    while count > 1 and not tokenish(count - 1):
        count -= 1  # a word after the token is not part of it
    random_looking = sum(1 for i in range(count) if tokenish(i))
    return count if count > 1 and 2 * random_looking >= count else 0


#: Joined tokens tried per text. Each try runs every token shape; a text of
#: thousands of prefixed, random-looking fragments ("ghp_a1 ghp_b2 …") made that
#: cost seconds a megabyte (issue 31). Past the budget the rest of the group is
#: taken for a broken-up credential: refused, or blanked out, rather than read.
_MAX_JOINS = 64


_FRAGMENT_CHAR = r"[A-Za-z0-9_\-+/=.]"
# Two or more fragments separated only by one to three spaces or tabs, or one
# line break with spaces around it: a whole group in one match, possessive so
# that it never backtracks.
_GROUP = re.compile(
    rf"(?<!{_FRAGMENT_CHAR}){_FRAGMENT_CHAR}++"
    rf"(?:(?:[ \t]{{1,3}}+|[ \t]*+\r?\n[ \t]*+)(?={_FRAGMENT_CHAR}){_FRAGMENT_CHAR}++)+"
)
_PREFIX_AT = re.compile(rf"(?=(?:{_PREFIX.pattern}))")


def _tokenish_pieces(pieces: list[str]) -> list[int]:
    """The index of each random-looking piece (:func:`_tokenish`), in order:
    one with a digit, or with both an upper-case letter (it differs from its
    lower case) and a lower-case one (from its upper case). Pieces are ASCII
    (:data:`_FRAGMENT`). Each test is the C library's over all the pieces at
    once, no Python step per piece (a wrapped line of tens of thousands)."""
    digit = map(is_not, map(_DIGIT.search, pieces), repeat(None))
    mixed = map(and_, map(ne, map(str.lower, pieces), pieces), map(ne, map(str.upper, pieces), pieces))
    return list(compress(count(), map(or_, digit, mixed)))


def spaced_scanner(matches: Matches) -> Scanner:
    """Spans of prefixed tokens broken by spaces or line breaks that ``matches`` when joined.

    Linear in the text (issue 31): a group of fragments is found by one
    pattern, the prefixes in it by another, and only the fragments after a
    prefix are looked at one by one."""

    def scan(text: str) -> Iterator[tuple[int, int]]:
        if _PREFIX_MARK.search(text) is None or _PREFIX.search(_SPACES.sub("", text)) is None:
            return
        joins = 0
        for group in _GROUP.finditer(text):
            pieces = _FRAGMENT.findall(group.group())
            joined = "".join(pieces)
            prefixes = _PREFIX_AT.finditer(joined)
            first_prefix = next(prefixes, None)
            if first_prefix is None:
                continue  # no prefix in the group: nothing below to look at
            offsets = [0, *accumulate(map(len, pieces))]
            tokenish = _tokenish_pieces(pieces)
            is_tokenish = set(tokenish)
            for prefix in chain((first_prefix,), prefixes):
                start = bisect_left(offsets, prefix.start())
                if offsets[start] != prefix.start() or start >= len(pieces) - 1:
                    continue  # not at a fragment's start, or in the last fragment
                # A prefix within this fragment and the five after it (endpos cuts there).
                if _PREFIX.match(joined, offsets[start], offsets[min(start + 6, len(pieces))]) is None:
                    continue
                first = bisect_left(tokenish, start)
                if first == len(tokenish) or tokenish[first] >= start + _MAX_FRAGMENTS:
                    continue  # no random-looking piece: no chain
                count = _chain(pieces[start : start + _MAX_FRAGMENTS], partial(_member, is_tokenish, start))
                if not count:
                    continue
                joins += 1
                if joins > _MAX_JOINS:
                    yield _piece_span(text, group, start)[0], group.end()
                    return
                if matches("".join(pieces[start : start + count])) and not matches(pieces[start]):
                    yield _piece_span(text, group, start)[0], _piece_span(text, group, start + count - 1)[1]
                    break

    return scan


def _member(indices: set[int], offset: int, i: int) -> bool:
    return offset + i in indices


def _piece_span(text: str, group: re.Match[str], index: int) -> tuple[int, int]:
    """Where fragment ``index`` of ``group`` is in ``text``."""
    for i, fragment in enumerate(_FRAGMENT.finditer(text, group.start(), group.end())):
        if i == index:
            return fragment.span()
    raise IndexError(index)


# Four or more single characters, each followed by one space: "p a s s w o r d".
_LETTER_RUN = re.compile(r"(?<!\S)(?:\S )(?:\S ){2,}\S(?!\S)")


#: Characters each side of a spelt-out run in which a secret it takes part in is
#: looked for, in a window twice as wide (the context the rules read).
_RUN_REACH = 256


def _run_windows(runs: list[tuple[int, int]], size: int) -> Iterator[tuple[int, int, int, int, list[tuple[int, int]]]]:
    """``(start, end, keep_start, keep_end, runs)``: a window of the text around
    one or more runs (``(start, end)`` each), merged where they overlap (a run
    never straddles one)."""
    window: list[tuple[int, int]] = []
    start = end = keep_start = keep_end = 0
    for run_start, run_end in runs:
        low = max(0, run_start - 2 * _RUN_REACH)
        if window and low <= end:
            window.append((run_start, run_end))
        else:
            if window:
                yield start, end, keep_start, keep_end, window
            window = [(run_start, run_end)]
            start, keep_start = low, run_start - _RUN_REACH
        end, keep_end = min(size, run_end + 2 * _RUN_REACH), run_end + _RUN_REACH
    if window:
        yield start, end, keep_start, keep_end, window


def letter_spaced_scanner(spans: Callable[[str], Iterator[tuple[int, int]]]) -> Scanner:
    """The secrets that ``spans`` finds in the text once its spelt-out runs are
    joined, mapped back onto the text (spaces and all).

    Only around the runs (issue 31: one run made every rule read the whole text
    again): a secret a run takes part in lies within :data:`_RUN_REACH`
    characters of it; one further away the rules find in the text as it is."""

    def scan(text: str) -> Iterator[tuple[int, int]]:
        runs = [run.span() for run in _LETTER_RUN.finditer(text)]
        for start, end, keep_start, keep_end, inside in _run_windows(runs, len(text)):
            joined: list[str] = []
            where: list[int] = []  # index in ``text`` of each character of the joined text
            cursor = start
            for run_start, run_end in [*inside, (end, end)]:
                joined.append(text[cursor:run_start])
                where.extend(range(cursor, run_start))
                joined.append(text[run_start:run_end:2])
                where.extend(range(run_start, run_end, 2))
                cursor = run_end
            for s, e in spans("".join(joined)):
                first, last = where[s], where[e - 1] + 1
                if last > keep_start and first < keep_end:
                    yield first, last

    return scan
