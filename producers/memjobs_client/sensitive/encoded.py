"""Secrets in disguise: base64 or hex of a known shape, and tokens broken by spaces.

What: :func:`encoded_scanner` decodes base64 (standard or URL-safe) and hex
runs and refuses the run when its decoded text matches a token shape or a
disclosure ("c2stcHJvai0..." is ``sk-proj-...``); :func:`spaced_scanner`
joins the pieces of a token that starts with a vendor prefix and was broken
by spaces or line breaks ("ghp_A1b2 C3d4 E5f6 ...", a key wrapped in a chat
window) and tries the shapes on the joined token.

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
    r"(?<![A-Za-z0-9_\-])(?:sk-|sk_live_|rk_live_|sk_test_|whsec_|gh[pousr]_|github_pat_|glpat-|xox[abpores]-"
    r"|AKIA|ASIA|AIza|hf_|npm_|pypi-|SG\.|key-|LTAI|AKID|eyJ|ya29\.|GOCSPX-|dop_v1_|hvs\.)"
)
_FRAGMENT = re.compile(r"[A-Za-z0-9_\-+/=.]+")
_GAP = re.compile(r"(?:[ \t]{1,3}|[ \t]*(?:\r?\n|\\n)[ \t]*)")
_MAX_FRAGMENTS = 16


def _tokenish(fragment: str) -> bool:
    """A piece of a random token rather than a word: a digit, or mixed case."""
    return len(fragment) >= 2 and (
        any(c.isdigit() for c in fragment)
        or (any(c.isupper() for c in fragment) and any(c.islower() for c in fragment))
    )


def spaced_scanner(matches: Matches) -> Scanner:
    """Spans of prefixed tokens broken by spaces or line breaks that ``matches`` when joined."""

    def scan(text: str) -> Iterator[tuple[int, int]]:
        for prefix in _PREFIX.finditer(text):
            first = _FRAGMENT.match(text, prefix.start())
            if first is None:
                continue
            pieces, end = [first.group()], first.end()
            while len(pieces) < _MAX_FRAGMENTS:
                gap = _GAP.match(text, end)
                piece = _FRAGMENT.match(text, gap.end()) if gap is not None else None
                if piece is None or not _tokenish(piece.group()):
                    break
                pieces.append(piece.group())
                end = piece.end()
            if len(pieces) > 1 and matches("".join(pieces)):
                yield prefix.start(), end

    return scan
