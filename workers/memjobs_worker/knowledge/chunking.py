"""Split a document into overlapping chunks sized in characters.

What: :func:`chunk_text` cuts text into windows of at most ``size_chars``
code points (Python ``str`` characters, so a Chinese character counts one),
each starting ``overlap_chars`` before the previous one ended.

Why this shape: the users write Chinese, so sizes are in characters, not bytes
or words. A chunk ends, by preference, at a sentence end (。！？；.!?; or a
newline), else at a comma (，、,：), else at whitespace, found in the last 30%
of the window, so a chunk reads as whole sentences. A cut never falls between a
base character and what extends it (combining marks, variation selectors, the
zero-width joiner, emoji modifiers), so no chunk starts with a dangling accent
or half an emoji; only a single cluster longer than the window is cut.
Offsets are into the original text (``text[c.start:c.end] == c.text``), and the
result depends on nothing but the arguments.
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass

#: The share of a window, from its end, searched for a good place to cut.
BOUNDARY_SHARE = 0.3

_SENTENCE_END = frozenset("。！？；…\n")
_ASCII_SENTENCE_END = frozenset(".!?;")  # an end only when whitespace follows
_COMMA = frozenset("，、：")
_ASCII_COMMA = frozenset(",:")  # likewise: "1,000" and "a:b" are not breaks
#: Closing quotes and brackets that belong to the sentence they close.
_CLOSERS = frozenset("”’」』）》】〉)]}\"'")
_ZWJ = "\u200d"


@dataclass(frozen=True)
class Chunk:
    """One chunk: its position in the document and its text.

    ``start``/``end`` are character offsets into the chunked text, end exclusive.
    """

    index: int
    text: str
    start: int
    end: int


def chunk_hash(text: str) -> str:
    """The sha256 hex digest of the NFC form of ``text``.

    NFC first, so the same words typed with composed or decomposed accents
    hash alike and a re-index reuses their stored embedding.
    """
    normal = unicodedata.normalize("NFC", text)
    return hashlib.sha256(normal.encode("utf-8", "surrogatepass")).hexdigest()


def chunk_text(text: str, *, size_chars: int = 500, overlap_chars: int = 80) -> list[Chunk]:
    """Split ``text`` into chunks of at most ``size_chars`` characters.

    Parameters:
        size_chars: the longest chunk, in characters.
        overlap_chars: how many characters (at most) a chunk repeats from the
            end of the one before, so a sentence cut in two is whole in one.

    Returns:
        The chunks in document order; ``[]`` for empty or whitespace-only text.

    Raises:
        ValueError: ``size_chars`` is not greater than ``overlap_chars``, or a
            size is negative.
    """
    if overlap_chars < 0 or size_chars < 1:
        raise ValueError("size_chars must be positive and overlap_chars not negative")
    if size_chars <= overlap_chars:
        raise ValueError(f"size_chars ({size_chars}) must exceed overlap_chars ({overlap_chars})")
    n = len(text)
    chunks: list[Chunk] = []
    start = _skip_space(text, 0)
    while start < n:
        end = n if n - start <= size_chars else _cut(text, start, size_chars)
        stop = end
        while stop > start and text[stop - 1].isspace():
            stop -= 1
        if stop > start:
            chunks.append(Chunk(len(chunks), text[start:stop], start, stop))
        if end >= n:
            break
        start = _skip_space(text, _next_start(text, start, stop if stop > start else end, overlap_chars))
    return chunks


def _cut(text: str, start: int, size: int) -> int:
    """Where the chunk starting at ``start`` ends: the best break in its window."""
    limit = start + size
    low = max(start + 1, limit - int(size * BOUNDARY_SHARE))
    for find in (_sentence_break, _comma_break, _space_break):
        found = find(text, low, limit)
        if found is not None:
            return found
    end = limit
    while end > start and not _can_break(text, end):
        end -= 1
    # Only a cluster longer than the whole window is ever cut inside.
    return end if end > start else limit


def _next_start(text: str, start: int, end: int, overlap: int) -> int:
    """The start of the next chunk: at most ``overlap`` back from ``end``, on a cluster start."""
    nxt = max(end - overlap, start + 1)
    for pos in range(nxt, end):
        # Prefer to begin the overlap on a word or clause, not inside one.
        prev = text[pos - 1]
        if (prev.isspace() or prev in _SENTENCE_END or prev in _COMMA) and _can_break(text, pos):
            return pos
    while nxt < end and not _can_break(text, nxt):
        nxt += 1
    return nxt


def _sentence_break(text: str, low: int, limit: int) -> int | None:
    for i in range(limit - 1, low - 2, -1):
        ch = text[i]
        if ch not in _SENTENCE_END and ch not in _ASCII_SENTENCE_END:
            continue
        end = i + 1
        while end < limit and text[end] in _CLOSERS:
            end += 1
        if ch in _ASCII_SENTENCE_END and end < len(text) and not text[end].isspace():
            continue
        if low <= end <= limit and _can_break(text, end):
            return end
    return None


def _comma_break(text: str, low: int, limit: int) -> int | None:
    for end in range(limit, low - 1, -1):
        ch = text[end - 1]
        comma = ch in _COMMA or (ch in _ASCII_COMMA and end < len(text) and text[end].isspace())
        if comma and _can_break(text, end):
            return end
    return None


def _space_break(text: str, low: int, limit: int) -> int | None:
    for end in range(limit, low - 1, -1):
        if end < len(text) and text[end].isspace() and _can_break(text, end):
            return end
    return None


def _extends(ch: str) -> bool:
    """True for a character that attaches to the one before it."""
    if ch == _ZWJ or "\U0001f3fb" <= ch <= "\U0001f3ff" or "\U000e0020" <= ch <= "\U000e007f":
        return True
    return unicodedata.category(ch) in ("Mn", "Mc", "Me")


def _can_break(text: str, pos: int) -> bool:
    """True when a cut before ``text[pos]`` keeps every character cluster whole."""
    if pos <= 0 or pos >= len(text):
        return True
    before, after = text[pos - 1], text[pos]
    if _extends(after) or before == _ZWJ or (before == "\r" and after == "\n"):
        return False
    if _is_regional(before) and _is_regional(after):
        # Flags are pairs of regional indicators: break only between pairs.
        run = 0
        while pos - run - 1 >= 0 and _is_regional(text[pos - run - 1]):
            run += 1
        return run % 2 == 0
    return True


def _is_regional(ch: str) -> bool:
    return "\U0001f1e6" <= ch <= "\U0001f1ff"


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos
