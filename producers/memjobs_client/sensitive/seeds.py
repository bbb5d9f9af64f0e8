"""A bare BIP39 seed phrase: 12 to 24 words of the BIP39 English list whose
checksum holds, said with no "seed phrase" before it (issue 31, item 7).

Why the checksum: the list holds 2048 ordinary words ("abandon", "able",
"about" …), so a long enough run of them is not evidence alone; the last
word of a real phrase carries a checksum of the others (4 bits for 12 words, 8
for 24), which a sentence meets once in 16 tries at best, and an ordinary
sentence seldom has 12 list words in a row to begin with (the list has no
"the", "and", "my", "is"). A phrase said with a keyword ("seed phrase:",
"助记词") is the keyword rule's (:data:`~memjobs_client.sensitive.disclosures.SEED_PHRASE`),
checksum or not; a bare phrase with a word misheard fails its checksum and passes.

The word list is Trezor's reference implementation's (``mnemonic``, no
dependencies of its own), read once.

Linear: one pass over the words; in a run of list words only the windows
anchored within :data:`_SLACK` words of either end of the run are tried (a
phrase said with a list word or two around it), so a megabyte of list words
costs a few dozen checks, not one per word.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from functools import lru_cache

from mnemonic import Mnemonic

from memjobs_client.sensitive.rules import touching_marker

#: The phrase lengths BIP39 defines, longest first.
_LENGTHS = (24, 21, 18, 15, 12)
#: Words of the run tried before and after a phrase.
_SLACK = 3
_WORD = re.compile(r"[A-Za-z]+")
# What may stand between two words of a phrase read out: spaces, commas, line
# breaks, and list numbers ("1." "12)"); anything else ends a run.
_BETWEEN = re.compile(r"(?:[ \t\r\n,;]|\d{1,2}[.)])*+")


@lru_cache(maxsize=1)
def _index() -> dict[str, int]:
    return {word: i for i, word in enumerate(Mnemonic("english").wordlist)}


def checksum_ok(indices: list[int]) -> bool:
    """Whether BIP39 word ``indices`` (12, 15, 18, 21 or 24) carry a valid checksum."""
    bits = len(indices) * 11
    checksum_bits = bits // 33
    value = 0
    for i in indices:
        value = (value << 11) | i
    entropy = (value >> checksum_bits).to_bytes((bits - checksum_bits) // 8, "big")
    return hashlib.sha256(entropy).digest()[0] >> (8 - checksum_bits) == value & ((1 << checksum_bits) - 1)


# Where a run can be: twelve or more words of three to eight letters (the
# list's lengths) with only what _BETWEEN allows between them, found by the C
# library; the words are looked up only there (issue 31: a Python step per
# word of any text cost up to 0.1 s a megabyte).
#: A region lies in a run of letters, separators, digits, "." and ")", twelve
#: words of three letters and eleven separators long at least, and is judged by
#: that run alone (what ends it is not a letter). What a redaction's later round
#: looks for before reading the text again
#: (:func:`~memjobs_client.sensitive.rules.touching_marker`).
SEED_RUN = touching_marker((r"A-Za-z \t\r\n,;0-9.)", 47))
_REGION = re.compile(r"(?<![A-Za-z])(?:[A-Za-z]{3,8}(?:[ \t\r\n,;]|\d{1,2}[.)])+){11,}[A-Za-z]{3,8}(?![A-Za-z])")


def _runs(text: str) -> Iterator[list[tuple[int, int, int]]]:
    """Runs of 12 or more list words, as (index in the list, start, end) each."""
    for region in _REGION.finditer(text):
        yield from _region_runs(text, region.start(), region.end())


def _region_runs(text: str, start: int, end: int) -> Iterator[list[tuple[int, int, int]]]:
    index = _index()
    run: list[tuple[int, int, int]] = []
    last_end = 0
    for word in _WORD.finditer(text, start, end):
        found = index.get(word.group().lower())
        if run and (found is None or _BETWEEN.fullmatch(text, last_end, word.start()) is None):
            if len(run) >= _LENGTHS[-1]:
                yield run
            run = []
        if found is not None:
            run.append((found, word.start(), word.end()))
            last_end = word.end()
    if len(run) >= _LENGTHS[-1]:
        yield run


def seed_phrase_scanner(text: str) -> Iterator[tuple[int, int]]:
    """Spans of bare BIP39 phrases with a valid checksum."""
    for run in _runs(text):
        tried: set[tuple[int, int]] = set()
        for length in _LENGTHS:
            if length > len(run):
                continue
            starts = {
                *range(min(_SLACK, len(run) - length) + 1),
                *range(max(0, len(run) - length - _SLACK), len(run) - length + 1),
            }
            for start in sorted(starts):
                if (start, length) in tried:
                    continue
                tried.add((start, length))
                window = run[start : start + length]
                if checksum_ok([w[0] for w in window]):
                    yield window[0][1], window[-1][2]
                    break
            else:
                continue
            break
