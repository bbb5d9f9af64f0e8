"""Cut a gist or topic to a character limit where a phrase or word ends.

What: :func:`cut` returns the longest prefix of the text, within the limit,
that ends at a boundary a reader sees: the end of a phrase (Chinese or Latin
punctuation), else a space or a change between CJK and Latin script. Chinese
is written without spaces, so inside a run of Chinese characters the only safe
places are the punctuation marks; when there is none in reach, :func:`cut`
returns None and the caller asks the model for a shorter text (the digest
does, once). ``force=True`` is the last resort after that: it cuts after a
particle (的, 了, 和 …) when it can, else at the limit, never splitting a
character from its combining marks.

Why not always cut at 50: "我们讨论了搬家到杭州以后的生活安" ends mid-word; a
gist is read by a person, later, and must make sense on its own.
"""

from __future__ import annotations

import unicodedata

#: Punctuation that ends a phrase; the cut keeps sentence ends and drops the rest.
PHRASE_ENDS = set('，。、；：！？,.;:!?…—～~）)」』”"')
_KEEP_AT_END = set('。！？.!?…）)」』”"')
#: Chinese particles after which a phrase rarely continues the same word.
_PARTICLES = set("的了和与及并在是就都也吧呢啊")
#: A prefix shorter than this share of the limit is too short to stand for the whole.
MIN_SHARE = 0.5
_JOINERS = {"\u200d", "\u20e3"}


def normalise_spaces(text: str) -> str:
    """NFC with whitespace runs collapsed to one space, trimmed."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def cut(text: str, limit: int, *, force: bool = False) -> str | None:
    """``text`` (normalised) if it fits; else its longest boundary-ending prefix
    within ``limit`` characters; else None (or, with ``force``, a particle or hard cut)."""
    text = normalise_spaces(text)
    if len(text) <= limit:
        return text
    floor = max(1, int(limit * MIN_SHARE))
    phrase: int | None = None
    word: int | None = None
    for end in range(limit, floor - 1, -1):
        before, after = text[end - 1], text[end]
        if phrase is None and before in PHRASE_ENDS:
            phrase = end
        if word is None and (after == " " or before == " " or _script_change(before, after)):
            word = end
    for found in (phrase, word):
        if found is not None:
            kept = text[:found].rstrip()
            while kept and kept[-1] in PHRASE_ENDS and kept[-1] not in _KEEP_AT_END:
                kept = kept[:-1].rstrip()
            if len(kept) >= floor:
                return kept
    if not force:
        return None
    for end in range(limit, floor - 1, -1):
        if text[end - 1] in _PARTICLES and _is_cjk(text[end]):
            return text[:end]
    end = limit
    while end > 0 and (_continues(text[end]) or text[end - 1] in _JOINERS):
        end -= 1
    return text[:end].rstrip()


def _is_cjk(char: str) -> bool:
    return "\u3400" <= char <= "\u9fff" or "\uf900" <= char <= "\ufaff"


def _script_change(before: str, after: str) -> bool:
    """A boundary between a CJK character and a Latin letter or digit."""
    return (_is_cjk(before) and after.isascii() and after.isalnum()) or (
        _is_cjk(after) and before.isascii() and before.isalnum()
    )


def _continues(char: str) -> bool:
    """Whether ``char`` attaches to the character before it."""
    return (
        unicodedata.combining(char) != 0
        or char in _JOINERS
        or "\ufe00" <= char <= "\ufe0f"
        or "\U0001f3fb" <= char <= "\U0001f3ff"
    )
