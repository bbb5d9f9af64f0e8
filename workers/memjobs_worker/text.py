"""Text primitives the features share: Unicode normalisation, the scripts
written without spaces, and character pairs.

What: :func:`nfkc` and :func:`fold` (NFKC, then case folding) put text in the
form it is compared in; :func:`is_unspaced` says whether a character belongs
to a script written without spaces between words (Han, kana, Hangul, Thai,
...), :data:`HAN` is the Han ideographs as a regular-expression class, and
:func:`is_invisible` finds the characters dropped before splitting (format
characters, variation selectors); :func:`bigrams` and :func:`grams` cut a run
of such characters into the pairs that stand in for its words.

Why here: knowledge search (:mod:`~memjobs_worker.fulltext`), the
hashed embedder (:mod:`~memjobs_worker.embedding.hashing`) and
the grounding rule (:mod:`~memjobs_worker.sessions.grounding`) each split
Chinese into characters and pairs after NFKC; they are independent features,
so what they share sits below them. Each keeps its own way of splitting a
text into runs, because each output is fixed elsewhere: the knowledge index
records ``TOKENIZER_VERSION``, the embedder's vectors are stored, and the
grounding rule's verdicts are measured. A change to anything here changes
the knowledge tokens too (bump ``TOKENIZER_VERSION``) and the stored vectors.

The producers' credential check normalises on its own
(:mod:`memjobs_client.sensitive.normalize`): it keeps an offset map for
redaction and folds Cyrillic and Greek look-alikes, which no search here wants.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

# Letters of scripts written without spaces between words, by code point range.
_UNSPACED = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x0F00, 0x0FFF),  # Tibetan
    (0x1000, 0x109F),  # Myanmar
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x1780, 0x17FF),  # Khmer
    (0x2E80, 0x2FDF),  # CJK radicals
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3021, 0x3029),  # Hangzhou numerals
    (0x3038, 0x303C),
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3130, 0x318F),  # Hangul compatibility Jamo
    (0x31F0, 0x31FF),  # Katakana extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA000, 0xA4CF),  # Yi
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0x20000, 0x323AF),  # CJK extensions B-H
)

HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
"""Han ideographs of the Basic Multilingual Plane (extension A, unified,
compatibility), as the inside of a regular-expression class: ``f"[{HAN}]+"``."""


def nfkc(text: str) -> str:
    """``text`` in NFKC: full-width ``ＡＢＣ`` is ``ABC``, ``①`` is ``1``."""
    return unicodedata.normalize("NFKC", text)


def fold(text: str) -> str:
    """``text`` in NFKC and case-folded: the form two texts are compared in
    (full-width ``ＡＢＣ`` and ``abc`` fold alike, ``ß`` to ``ss``)."""
    return unicodedata.normalize("NFKC", text).casefold()


def is_unspaced(ch: str) -> bool:
    """Whether the character belongs to a script written without spaces
    between words (Han, kana, Hangul, Thai, Lao, Khmer, Myanmar, Tibetan, Yi)."""
    code = ord(ch)
    return any(low <= code <= high for low, high in _UNSPACED)


def is_invisible(ch: str) -> bool:
    """A format character (zero-width joiner, soft hyphen, ...) or a variation
    selector: nothing a reader sees, dropped before splitting."""
    return unicodedata.category(ch) == "Cf" or "\ufe00" <= ch <= "\ufe0f" or "\U000e0100" <= ch <= "\U000e01ef"


def bigrams(units: Sequence[str]) -> list[str]:
    """Each adjacent pair of ``units`` (characters of a run, or clusters),
    joined: ``"花生过敏"`` gives 花生 生过 过敏."""
    return [a + b for a, b in zip(units, units[1:], strict=False)]


def grams(units: Sequence[str]) -> list[str]:
    """What stands for a run in a search: its pairs, or its one unit when it
    has only one (a lone 花 is a word too); nothing for an empty run."""
    return [units[0]] if len(units) == 1 else bigrams(units)
