"""The detectors' shortcuts find what the plain patterns find (issue 31).

To be linear and cheap (``tests/security/test_detector_cost.py``) the detectors
try a costly pattern only where a cheap one says a match can begin, match
case-folded text instead of using ``re.IGNORECASE``, normalise by a
translation table, and look up seed words only in runs of list-length words.
Each shortcut is checked here against the plain way on random text made of
the pieces it is about (its prefixes, keywords, separators, look-alike
letters), so that a shortcut that misses a match fails.
"""

from __future__ import annotations

import random
import re

import pytest
from mnemonic import Mnemonic

from memjobs_client.sensitive import disclosures, document, encoded, numbers, seeds, shapes
from memjobs_client.sensitive.normalize import normalise
from memjobs_client.sensitive.rules import folded, regex_scanner


def _texts(pieces: list[str], count: int, seed: int, most: int = 12) -> list[str]:
    rnd = random.Random(seed)
    glue = [" ", "", "", "-", "_", ".", "\t", "=", "\n", "x", "9", "/"]
    return ["".join(rnd.choice(pieces) + rnd.choice(glue) for _ in range(rnd.randint(1, most))) for _ in range(count)]


@pytest.mark.parametrize("rule", sorted(shapes._LEADS))
def test_a_vendor_pattern_led_by_its_prefixes_finds_what_finditer_finds(rule: str) -> None:
    pattern = next(p for r, _, p in shapes._VENDOR_KEYS if r == rule)
    plain, led = regex_scanner(pattern), regex_scanner(pattern, lead=shapes._LEADS[rule])
    # One prefix per alternative: the first choice of each group and class.
    lead = re.sub(r"\(\?=[^)]*\)", "", re.sub(r"\(\?:([^|)]*)[^)]*\)", r"\1", shapes._LEADS[rule]))
    prefixes = re.sub(r"\[(.)[^\]]*\]", r"\1", lead).replace("\\", "").split("|")
    pieces = [*prefixes, "A" * 16, "a1B2" * 5, "0123456789abcdef" * 2, "eyJhbGci", "Ab9-_" * 9]
    found = 0
    for text in _texts(pieces, 1500, seed=len(rule)):
        assert list(led(text)) == list(plain(text)), text
        found += bool(list(plain(text)))
    assert found  # the texts hold matches: the comparison means something


def test_folding_takes_for_an_ascii_letter_exactly_what_ignorecase_does() -> None:
    letter = re.compile("(?i:[a-z])")
    for code in range(0x80, 0x110000):
        char = chr(code)
        if letter.fullmatch(char):
            assert folded(char).isascii() and re.fullmatch("(?i)" + folded(char), char), hex(code)
        else:
            assert folded(char) == char or not folded(char).isascii(), hex(code)


def test_normalising_by_a_table_keeps_every_offset_of_the_original() -> None:
    pieces = [
        "ab1 :=",
        "\u200b",
        "ｐａｓｓ",
        "１２",
        "ﬁ",
        "㎏",
        "а",
        "\u00ad",
        "é",
        "e\u0301",
        "密码",
        "\U0001d400",
        "½",
        "\ufeff",
    ]
    for text in _texts(pieces, 800, seed=3, most=8):
        normalised = normalise(text)
        for start in range(len(normalised.text)):
            for end in range(start + 1, min(len(normalised.text), start + 6) + 1):
                a, b = normalised.orig_span(start, end)
                # The original characters of a span normalise to text that holds it.
                assert normalised.text[start:end] in normalise(text[a:b]).text, (text, start, end)


def test_one_time_codes_led_by_their_keywords_are_those_finditer_finds() -> None:
    plain = regex_scanner(numbers._OTP, accept=numbers._otp_ok)
    anchored = numbers.NUMBER_RULES[-1].scan
    pieces = [
        "code",
        "pin",
        "2fa",
        "mfa",
        "otp",
        "totp",
        "pass",
        "password",
        "passcode",
        "door",
        "is",
        "was",
        "for",
        "my",
        ":",
        "=",
        "是",
        "1234",
        "123456",
        "12 34",
        "1 2 3 4",
        "ab12cd",
        "abc-12d",
        "G-",
        "your",
        "zip",
        "CODE",
        "PIN",
        "ıs",
        "verification",
        "one-time",
        "one time pass",
        "sms",
        "log-in",
        "4821",
        "minutes",
        # code words before a keyword, as (?i) reads them (a keyword with none before it leads no match)
        "google",
        "two factor",
        "sign in",
        "authorisation",
        "ſms",
        "\u212aeypad",
        "pİn",
        "abcd1234",
        "card",
    ]
    found = 0
    for text in _texts(pieces, 8000, seed=5, most=10):
        assert list(anchored(text)) == list(plain(text)), text
        found += bool(list(plain(text)))
    assert found > 100


def _plain_runs(text: str) -> list[list[tuple[int, int, int]]]:
    """Runs of list words, word by word over the whole text (no regions)."""
    index = seeds._index()
    runs: list[list[tuple[int, int, int]]] = []
    run: list[tuple[int, int, int]] = []
    last_end = 0
    for word in seeds._WORD.finditer(text):
        found = index.get(word.group().lower())
        if run and (found is None or seeds._BETWEEN.fullmatch(text, last_end, word.start()) is None):
            if len(run) >= 12:
                runs.append(run)
            run = []
        if found is not None:
            run.append((found, word.start(), word.end()))
            last_end = word.end()
    if len(run) >= 12:
        runs.append(run)
    return runs


def test_seed_words_looked_up_in_regions_make_the_same_runs() -> None:
    words = Mnemonic("english").wordlist
    rnd = random.Random(3)
    found = 0
    for _ in range(1500):
        parts = [
            rnd.choice(words) if rnd.random() < 0.85 else rnd.choice(["ab", "abandonment", "ABANDON", "the", "7"])
            for _ in range(rnd.randint(8, 30))
        ]
        text = "".join(p + rnd.choice([" "] * 8 + [",", "\n", " 1. ", "12)", "-", ".", "123.", ""]) for p in parts)
        runs = _plain_runs(text)
        assert list(seeds._runs(text)) == runs, text
        found += bool(runs)
    assert found > 20


def test_digit_patterns_led_by_their_first_digit_find_what_the_look_behind_first_ones_find() -> None:
    # The plain patterns, opening with their look-behinds (tried at every position).
    run = re.compile(r"(?<![\d.,/:])\d+(?:[ \-]\d+)*(?![\d]|[.,]\d)")
    identity = re.compile(
        r"(?<![0-9A-Za-z])[1-8]\d{5}[ \-]?(?:18|19|20)\d{2}[01]\d[0-3]\d[ \-]?\d{3}[0-9Xx](?![0-9A-Za-z])"
    )
    digits_first = re.compile(r"(?<![0-9A-Za-z])(?=(?:G-)?\d{4,8}[ \t]*(?i:is|为|是))")
    # Numbers of the lengths and forms the patterns read, then a code's words and punctuation.
    pieces = ["1", "4111", "123456", "1990", "0307", "777X", "110101", "19900307", "١٢٣"]
    pieces += ["G-", "is", "是", "a", ":", "."]
    found = 0
    for text in _texts(pieces, 4000, seed=31, most=14):
        # Cards read runs of 13 characters or more only: the led pattern leaves out
        # most shorter ones (one cut short by its look-ahead may still come).
        long_runs = [m.span() for m in run.finditer(text) if len(m.group()) >= 13]
        assert [m.span() for m in numbers._DIGIT_RUN.finditer(text) if len(m.group()) >= 13] == long_runs, text
        assert [m.span() for m in numbers._CN_ID.finditer(text)] == [m.span() for m in identity.finditer(text)], text
        firsts = [m.start() for m in digits_first.finditer(text)]
        assert [m.start() for m in numbers._DIGITS_FIRST.finditer(text)] == firsts, text
        found += bool(long_runs) + bool(firsts)
    assert found > 100


def test_a_keyword_whose_value_is_a_marker_would_fail_every_plausibility_check() -> None:
    pieces = ["password", "pin", "key", "api_key", "token", "secret", "pw", "PASSWORD", ":", "=", " ", "\t", '"', "'"]
    pieces += ["[REDACTED]", "[REDACTED]", "“", "is", "for my", "hunter22", "1234", ":=", "=>", " :", " =", ": "]
    left_out = 0
    for text in _texts(pieces, 6000, seed=7, most=8):
        fold = folded(text)
        for keyword in disclosures._EN_KEYWORD.finditer(fold):
            assert keyword.span() == disclosures._EN_KEYWORD_ONLY.match(fold, keyword.start()).span()  # type: ignore[union-attr]
            if keyword.lastindex != 1:
                left_out += 1
                for plausible in (*disclosures._EN_PLAUSIBLE.values(), disclosures._EN_PLAUSIBLE_OTHERS):
                    assert plausible.match(text, keyword.end()) is None, text
    assert left_out > 100


def test_a_value_taken_right_after_its_keyword_passes_the_plausibility_check() -> None:
    # What lets the English rule judge a keyword's value before that check.
    pieces = ["password", "pin", "pass", "key", "token", "api key", "is", "was set to", ":", "=", "-", "to", " ", '"']
    pieces += ["hunter22", "1234", "12 34", "one two three four", "'s3cret!'", "superSecret99", "abcd1234", "****"]
    pieces += ["[REDACTED]", "wrong", "4096", "x", "：", "是", "it's", "you"]
    taken = 0
    for text in _texts(pieces, 6000, seed=11, most=8):
        for start, end in disclosures._keywords(text):
            family = disclosures._en_family(text[start:end])
            value = disclosures._EN_JUDGED.match(text, end)
            if value is not None and disclosures._en_value(family, value, text) is not None:
                taken += 1
                assert disclosures._EN_PLAUSIBLE.get(family, disclosures._EN_PLAUSIBLE_OTHERS).match(text, end), text
    assert taken > 100


def test_joins_are_looked_for_where_they_can_be() -> None:
    pieces = ["is", "IS", "password", "passphrase", "pin", "no", ":", "=", "是", "号", "->", " ", "\t", "\r", "\n"]
    pieces += ["- ", "* ", "1. ", "12) ", "> ", "### ", "[ ] ", "[x] ", "abc", "x" * 40, "\r\n", "pass phrase"]
    for text in _texts(pieces, 6000, seed=3, most=16):
        start, end = document._join_reach(text)
        whole = document._LINE_JOIN.sub("\\g<trail>\0", text)
        assert text[:start] + document._LINE_JOIN.sub("\\g<trail>\0", text[start:end]) + text[end:] == whole, text


def test_random_looking_pieces_found_at_once_are_those_found_one_by_one() -> None:
    rnd = random.Random(17)
    for _ in range(3000):
        pieces = [
            "".join(rnd.choice("aZ0_-+/=.xY9") for _ in range(rnd.randint(1, 6))) for _ in range(rnd.randint(1, 9))
        ]
        assert encoded._tokenish_pieces(pieces) == [i for i, piece in enumerate(pieces) if encoded._tokenish(piece)]
