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
from collections.abc import Callable, Iterator

from memjobs_client.sensitive.rules import Scanner

Matches = Callable[[str], bool]
"""Whether (decoded or joined) text matches one of the inner rules."""

_B64 = re.compile(r"(?<![A-Za-z0-9+/=_\-])[A-Za-z0-9+/_\-]{16,}={0,2}(?![A-Za-z0-9+/=_\-])")
_HEX = re.compile(r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}[ :]?){10,}(?![0-9A-Fa-f])")
_MAX_DECODE = 64 * 1024


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
_SPACES = re.compile(r"\s+|\\n")
_FRAGMENT = re.compile(r"[A-Za-z0-9_\-+/=.]+")
_GAP = re.compile(r"[ \t]{1,3}|[ \t]*(?:\r?\n|\\n)[ \t]*")
_MAX_FRAGMENTS = 24


def _tokenish(fragment: str) -> bool:
    """A piece of a random token rather than a word: a digit, or mixed case."""
    return any(c.isdigit() for c in fragment) or (
        any(c.isupper() for c in fragment) and any(c.islower() for c in fragment)
    )


def _groups(text: str) -> Iterator[list[re.Match[str]]]:
    """Runs of two or more fragments separated only by a few spaces or one line break."""
    group: list[re.Match[str]] = []
    for fragment in _FRAGMENT.finditer(text):
        if group and _GAP.fullmatch(text, group[-1].end(), fragment.start()) is None:
            if len(group) > 1:
                yield group
            group = []
        group.append(fragment)
    if len(group) > 1:
        yield group


def _chain(pieces: list[str]) -> int:
    """How many of ``pieces`` form one broken-up token: pieces as long as the
    second one (a wrapped or grouped token) or random-looking ones, with at
    least half of them random-looking."""
    width = len(pieces[1])
    count = 1
    for piece in pieces[1:_MAX_FRAGMENTS]:
        if len(piece) != width and not _tokenish(piece):
            break
        count += 1
    while count > 1 and not _tokenish(pieces[count - 1]):
        count -= 1  # a word after the token is not part of it
    random_looking = sum(1 for p in pieces[:count] if _tokenish(p))
    return count if count > 1 and 2 * random_looking >= count else 0


def spaced_scanner(matches: Matches) -> Scanner:
    """Spans of prefixed tokens broken by spaces or line breaks that ``matches`` when joined."""

    def scan(text: str) -> Iterator[tuple[int, int]]:
        if _PREFIX.search(_SPACES.sub("", text)) is None:
            return
        for group in _groups(text):
            pieces = [m.group() for m in group]
            for start in range(len(pieces) - 1):
                if _PREFIX.match("".join(pieces[start:start + 6])) is None:
                    continue
                count = _chain(pieces[start:])
                if count and not matches(pieces[start]) and matches("".join(pieces[start:start + count])):
                    yield group[start].start(), group[start + count - 1].end()
                    break

    return scan


# Four or more single characters, each followed by one space: "p a s s w o r d".
_LETTER_RUN = re.compile(r"(?<!\S)(?:\S )(?:\S ){2,}\S(?!\S)")


def letter_spaced_scanner(spans: Callable[[str], Iterator[tuple[int, int]]]) -> Scanner:
    """The secrets that ``spans`` finds in the text once its spelt-out runs are
    joined, mapped back onto the text (spaces and all)."""

    def scan(text: str) -> Iterator[tuple[int, int]]:
        runs = list(_LETTER_RUN.finditer(text))
        if not runs:
            return
        joined: list[str] = []
        where: list[int] = []  # index in ``text`` of each character of the joined text
        cursor = 0
        for run in [*runs, None]:
            stop = run.start() if run is not None else len(text)
            joined.append(text[cursor:stop])
            where.extend(range(cursor, stop))
            if run is not None:
                joined.append(run.group()[::2])
                where.extend(range(run.start(), run.end(), 2))
                cursor = run.end()
        for start, end in spans("".join(joined)):
            yield where[start], where[end - 1] + 1

    return scan
