"""Text normalisation with an offset map back to the original.

What: :func:`normalise` applies NFKC one character at a time and drops
invisible format characters (Unicode category Cf: zero-width spaces and
joiners, bidi controls, soft hyphen, BOM, ...), and records where each piece
of the result came from.  :meth:`Normalised.orig_span` maps a match in the
normalised text back to the original text.

Why: full-width ``ｐａｓｓｗｏｒｄ：`` and ``pass\\u200bword`` must match the
rules written for ``password:``, and :func:`~memjobs_client.sensitive.redact_secrets`
must still blank out exactly the original characters of each secret.
Latin look-alikes from Cyrillic and Greek (``pаsswоrd`` with a Cyrillic ``а``
and ``о``) are folded to Latin, one character for one, so offsets still hold.
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from dataclasses import dataclass

# Unicode general category Cf (format characters: zero-width space and joiners,
# bidi controls, soft hyphen, BOM, tag characters, ...).  They are invisible,
# so they are dropped before matching: "pass\u200bword" is "password".
_FORMAT_CHARS = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    "\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
_RUNS = re.compile(r"[\x00-\x7f]+|[^\x00-\x7f]+")

# Cyrillic and Greek letters that look like Latin ones, folded one for one
# (the map keeps lengths, so offsets are unchanged).
_CONFUSABLES = str.maketrans(
    "аеорсухѕіјԁԝһӏкмтвпАВЕКМНОРСТХЅІЈԜ"
    "αοριυνκτεχβωΑΒΕΖΗΙΚΜΝΟΡΤΥΧ",
    "aeopcyxsijdwhlkmtbnABEKMHOPCTXSIJW"
    "aopiuvktexbwABEZHIKMNOPTYX",
)
_NEEDS_FOLD = re.compile("[\u0370-\u03ff\u0400-\u052f]")


@dataclass(frozen=True)
class _Segment:
    norm_start: int
    orig_start: int
    orig_len: int
    identity: bool  # True: character i of the segment maps to character i


@dataclass(frozen=True)
class Normalised:
    """Normalised text and where each of its segments came from."""

    text: str
    segments: tuple[_Segment, ...]
    starts: tuple[int, ...]  # norm_start of each segment, for bisect

    def orig_span(self, start: int, end: int) -> tuple[int, int]:
        """Map a non-empty span of the normalised text back to the original."""
        seg = self.segments[bisect.bisect_right(self.starts, start) - 1]
        o_start = seg.orig_start + (start - seg.norm_start if seg.identity else 0)
        last = end - 1
        seg = self.segments[bisect.bisect_right(self.starts, last) - 1]
        if seg.identity:
            o_end = seg.orig_start + (last - seg.norm_start) + 1
        else:
            o_end = seg.orig_start + seg.orig_len
        return o_start, o_end


def normalise(text: str) -> Normalised:
    """NFKC character by character, dropping format characters, with an offset map.

    Linear in the text: text that NFKC leaves alone (checked by the C library at
    once) is one segment; otherwise only the characters NFKC changes or drops get
    segments of their own, and the unchanged stretches between them are one each.
    """
    if unicodedata.is_normalized("NFKC", text) and not _FORMAT_CHARS.search(text):
        return Normalised(_fold(text), (_Segment(0, 0, len(text), True),), (0,))
    pieces: list[str] = []
    segments: list[_Segment] = []
    norm_len = 0

    def add(piece: str, orig_start: int, orig_len: int, identity: bool) -> None:
        nonlocal norm_len
        if not piece:
            return
        pieces.append(piece)
        last = segments[-1] if segments else None
        if (identity and last is not None and last.identity
                and last.orig_start + last.orig_len == orig_start):
            segments[-1] = _Segment(last.norm_start, last.orig_start, last.orig_len + orig_len, True)
        else:
            segments.append(_Segment(norm_len, orig_start, orig_len, identity))
        norm_len += len(piece)

    for run in _RUNS.finditer(text):
        chunk = run.group()
        if chunk.isascii() or (
            unicodedata.is_normalized("NFKC", chunk) and not _FORMAT_CHARS.search(chunk)
        ):
            add(chunk, run.start(), len(chunk), True)
            continue
        same = run.start()  # start of the stretch of characters NFKC leaves alone
        for offset, char in enumerate(chunk):
            piece = _char_nfkc(char)
            if piece == char:
                continue
            at = run.start() + offset
            add(text[same:at], same, at - same, True)
            add(piece, at, 1, False)
            same = at + 1
        add(text[same:run.end()], same, run.end() - same, True)
    segs = tuple(segments)
    return Normalised(_fold("".join(pieces)), segs, tuple(s.norm_start for s in segs))


@functools.lru_cache(maxsize=4096)
def _char_nfkc(char: str) -> str:
    """One character as the matching sees it: NFKC, or nothing for a format character."""
    return "" if _FORMAT_CHARS.match(char) else unicodedata.normalize("NFKC", char)


def _fold(text: str) -> str:
    return text.translate(_CONFUSABLES) if _NEEDS_FOLD.search(text) else text


def nfkc(text: str) -> str:
    """The normalised text alone, for matching without redaction."""
    return normalise(text).text
