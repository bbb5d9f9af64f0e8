"""Text normalisation with an offset map back to the original.

What: :func:`normalise` applies NFKC one character at a time and drops
invisible format characters (Unicode category Cf: zero-width spaces and
joiners, bidi controls, soft hyphen, BOM, ...).  :meth:`Normalised.orig_span`
maps a match in the normalised text back to the original text.

Why: full-width ``ｐａｓｓｗｏｒｄ：`` and ``pass\\u200bword`` must match the
rules written for ``password:``, and :func:`~memjobs_client.sensitive.redact_secrets`
must still blank out exactly the original characters of each secret.
Latin look-alikes from Cyrillic and Greek (``pаsswоrd`` with a Cyrillic ``а``
and ``о``) are folded to Latin, one character for one, so offsets still hold.

How, linear and with no Python step per character (issue 31): each distinct
character of the text is normalised once, into a table that ``str.translate``
applies in C. A character that becomes one character keeps every offset; only
when some become two or more (ligatures, "㎏") or none (format characters) is
the offset map built, and then only when a span is mapped back (redaction): the
normalised length of every character, summed by the C library.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from array import array
from bisect import bisect_right
from itertools import accumulate, repeat

# Unicode general category Cf (format characters: zero-width space and joiners,
# bidi controls, soft hyphen, BOM, tag characters, ...).  They are invisible,
# so they are dropped before matching: "pass\u200bword" is "password".
_FORMAT_CHARS = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    "\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)

# Cyrillic and Greek letters that look like Latin ones, folded one for one
# (the map keeps lengths, so offsets are unchanged).
_CONFUSABLES = str.maketrans(
    "аеорсухѕіјԁԝһӏкмтвпАВЕКМНОРСТХЅІЈԜαοριυνκτεχβωΑΒΕΖΗΙΚΜΝΟΡΤΥΧ",
    "aeopcyxsijdwhlkmtbnABEKMHOPCTXSIJWaopiuvktexbwABEZHIKMNOPTYX",
)
_NEEDS_FOLD = re.compile("[\u0370-\u03ff\u0400-\u052f]")


class Normalised:
    """Normalised text and the way back to the original's offsets."""

    __slots__ = ("text", "_original", "_widths", "_starts")

    def __init__(self, text: str, original: str, widths: dict[str, int] | None) -> None:
        self.text = text
        self._original = original
        #: Normalised length of each character that does not become exactly one
        #: (None: every character became one, offsets are the original's).
        self._widths = widths
        self._starts: array[int] | None = None

    @property
    def offsets_hold(self) -> bool:
        """Whether every offset of the text is the original's (no character
        became two or none): :meth:`orig_span` maps each span to itself."""
        return self._widths is None

    def orig_span(self, start: int, end: int) -> tuple[int, int]:
        """Map a non-empty span of the normalised text back to the original: from
        the start of the character ``start`` came from to the end of the one
        ``end - 1`` came from."""
        if self._widths is None:
            return start, end
        starts = self._starts
        if starts is None:
            widths = self._widths
            # Where each original character's piece starts in the normalised text.
            starts = self._starts = array("q", accumulate(map(widths.get, self._original, repeat(1)), initial=0))
        # The last character whose piece starts at or before the offset (one
        # dropped to nothing shares its start with the next, which wins).
        return bisect_right(starts, start) - 1, bisect_right(starts, end - 1)


def normalise(text: str) -> Normalised:
    """NFKC character by character, dropping format characters, with an offset map."""
    if text.isascii():
        return Normalised(text, text, None)
    if unicodedata.is_normalized("NFKC", text) and not _FORMAT_CHARS.search(text):
        return Normalised(_fold(text), text, None)
    table: dict[int, str] = {}
    widths: dict[str, int] = {}
    for char in set(text):
        piece = _char_nfkc(char)
        if piece != char:
            table[ord(char)] = piece
            if len(piece) != 1:
                widths[char] = len(piece)
    return Normalised(_fold(text.translate(table)), text, widths or None)


@functools.lru_cache(maxsize=65536)
def _char_nfkc(char: str) -> str:
    """One character as the matching sees it: NFKC, or nothing for a format character."""
    return "" if _FORMAT_CHARS.match(char) else unicodedata.normalize("NFKC", char)


def _fold(text: str) -> str:
    return text.translate(_CONFUSABLES) if _NEEDS_FOLD.search(text) else text


def nfkc(text: str) -> str:
    """The normalised text alone, for matching without redaction."""
    return normalise(text).text
