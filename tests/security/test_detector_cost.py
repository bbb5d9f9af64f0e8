"""Every detector is linear in its input: text built to hit a detector's hot
path costs about a second of CPU a megabyte at most (issue 31, item 1).

The finding: four session turns of ``"card " + "4 " * 120000`` froze the API for
70 s (the card scan re-read a window of digits per candidate), and runs of
``pw=pw=…``, prefixed near-miss tokens or full-width text grew with the square
of their length. Each case below is one input kind (a plain check, a
redaction, machine text and JSON, a session's four turns, a memory document)
fed a worst case for one detector (:func:`hot_paths`: digit runs with every
separator near card words, keywords repeated near digits, full-width digits
and CJK keywords, numbers spelt out in English and Chinese, base64 and hex
runs and blobs, one 1 MB line, many short lines, huge and deep JSON,
``key=value`` runs, near-miss and real secrets repeated, markers, look-alike
letters …), a quarter megabyte of it (:data:`SIZE`: the file runs in well under
a minute); the bound is per megabyte, and
:func:`test_four_times_the_text_costs_about_four_times_the_cpu` checks that a
larger text costs about proportionally more, not its square.

The bound is CPU time (``time.process_time``: other work on the machine does
not count), the least of up to :data:`TRIES` runs (a loaded machine slows one
run, seldom three). Every input kind is held to :data:`BOUND_S` (1.5 s: issue
31's one second, with room for a slower or loaded machine), text dense
with real secrets (one every 18 to 90 characters, :data:`DENSE_SECRETS`)
redacted too: a redaction's second round, around what it blanked out, is the
whole text again when secrets are that close, and reads again only what a
marker can have changed (``docs/security.md``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from memjobs_client.sensitive import (
    find_sensitive_document,
    find_sensitive_text,
    redact_secrets,
    redact_structured,
)

MB = 1 << 20
#: CPU seconds a megabyte, every input kind. Issue 31's contract is 1 s: every
#: case meets it on the machine it was measured on, the costliest (text dense
#: with real secrets redacted, or sent as a session's four turns) at 0.85-0.95 s
#: (docs/security.md, "Detector cost"). Machines of this kind differ by a fifth
#: and more: on a slower one the costliest measured 1.03 s alone and 1.22-1.25 s
#: late in a whole `make test` (2026-12-06), so 1.2 failed a detector that had
#: not changed. 1.5 still fails one that turns quadratic (a megabyte's cost
#: grows sixteenfold for four); the linearity test below is the check no CPU's
#: speed can move.
BOUND_S = 1.5
#: Runs of a case at most: the least counts.
TRIES = 3


def _sized(size: int, unit: str, head: str = "") -> str:
    """``head``, then ``unit`` repeated to ``size`` bytes of UTF-8."""
    return head + unit * ((size - len(head.encode())) // len(unit.encode()))


def _json_huge(size: int) -> str:
    row = {"api_key": "k1" * 8, "note": "card 4 4 4 4", "password": "x", "n": [1, 2, 3]}
    return json.dumps([row] * (size // len(json.dumps(row))))


def _json_deep(size: int) -> str:
    unit = '{"token": [' * 40 + "1" + "]}" * 40
    return ",".join([unit] * (size // (len(unit) + 1)))


def hot_paths(size: int) -> list[tuple[str, str]]:
    """(name, text): each ``size`` bytes aimed at one detector's hot path."""
    return [
        # digits: cards, identity numbers, codes
        ("card_spaced_digits", _sized(size, "4 ", "card ")),  # the finding
        ("card_no_luhn_digits", _sized(size, "5 ", "card ")),  # no window passes: every one is tried
        ("card_dashed_cjk", _sized(size, "5-", "卡号")),
        ("digits_every_separator", _sized(size, "4 4-4.4,4/4:4_4 ", "card ")),
        ("digits_dotted", _sized(size, "4.", "card ")),
        ("ssn_like", _sized(size, "123-45-6789 ")),
        ("keywords_near_digits_short", _sized(size, "card 4111 password 12 key 56 pin 9 ")),
        ("otp_digits", _sized(size, "1 ", "code is ")),
        ("code_words", _sized(size, "one-time code: ")),
        ("cjk_password_digits", _sized(size, "密码是1")),
        ("full_width", _sized(size, "ｐａｓｓ１２ ")),
        ("full_width_digits_cjk", _sized(size, "卡号１２３４ 密码５６７８ 验证码９０１２ ")),
        ("full_width_digit_run", _sized(size, "１", "银行卡号")),
        # spelt out
        ("letters_spelt", _sized(size, "a ")),
        ("spelt_letters_keyword", _sized(size, "p a s s w o r d : 1 2 ")),
        ("spelt_english", _sized(size, "one two three four ", "my pin is ")),
        ("spelt_chinese", _sized(size, "一二三四五六", "密码是")),
        # encodings and long runs
        ("base64_runs", _sized(size, "QUJD" * 12000 + " ")),
        ("base64_blob", _sized(size, "QUJD")),
        ("hex_runs", _sized(size, "ab " * 5000 + "abc ")),
        ("hex_blob", _sized(size, "ab")),
        ("one_line_letters", "x" * size),
        ("prefixed_huge_tail", _sized(size, "A", "ghp_")),
        ("pem_without_end", _sized(size, "QUJD", "-----BEGIN PRIVATE KEY-----\n")),
        ("short_lines", _sized(size, "a\n")),
        ("doc_split_keywords", _sized(size, "- 我的银行卡密码是\n- 7391\n")),
        # machine text
        ("key_value_runs", _sized(size, "password=x ")),
        ("key_value_ampersand", _sized(size, "token=abcd1234&")),
        ("keyword_chain", _sized(size, "pw=")),  # each keyword's value ran to the end of the text
        ("json_huge", _json_huge(size)),
        ("json_deep", _json_deep(size)),
        ("json_huge_string", json.dumps({"password": "a1" * (size // 2 - 10)})),
        ("json_nested_arrays", "[" * (size // 2) + "]" * (size // 2)),
        ("json_nested_keys", _sized(size, '{"token":')),
        ("wifi_qr", _sized(size, "WIFI:T:WPA;S:x;P:;")),
        # near misses, markers, look-alikes
        ("near_miss_prefixed", _sized(size, "ghp_a1 ")),
        ("prefixes_unspaced", _sized(size, "eyJ")),  # a lead that read each tail read the rest of the text
        ("prefixes_in_a_word", _sized(size, "glpat-", "x")),
        ("keywords_unspaced", _sized(size, "password", "'")),  # a code's look-ahead read every letter after
        ("code_keywords_unspaced", _sized(size, "codepin")),
        (
            "near_miss_vendor",
            _sized(size, "AKIAAAAAAAAAAAAAAAA sk-abc eyJabc.def. xoxb-12 ghp_abc1 -----BEGIN RSA PRIVATE KEY----- "),
        ),
        ("markers", _sized(size, "password: [REDACTED] token=[REDACTED]&")),
        ("chinese_keywords_alone", _sized(size, "我的密码是验证码口令")),
        ("bip39_words", _sized(size, "abandon ")),
        ("login_pairs", _sized(size, "admin/")),
        ("zero_width", _sized(size, "p\u200ba\u200bs\u200bs ")),
        ("ligatures", _sized(size, "ﬁ")),
        ("dotless_i", _sized(size, "PİN ıs ")),
    ]


#: Text dense with real secrets (one every 18 to 90 characters): each is found,
#: blanked out, and its surroundings read again, which is the whole text again
#: when they are that close. Under :data:`BOUND_S` like any other, every kind.
DENSE_SECRETS: dict[str, Callable[[int], str]] = {
    "json_huge": _json_huge,  # a secret-like key with a value in each row
    "keywords_near_digits": lambda size: _sized(size, "card 4111 password 1234 key 5678 pin 9012 "),
    "key_value_secrets": lambda size: _sized(size, "password=hunter22 "),
    "value_first": lambda size: _sized(size, "abcd1234 is my password "),
    "url_user_info": lambda size: _sized(size, "http://u:p@h "),
}


#: The size each case is measured at: a quarter megabyte keeps the file under
#: a minute of CPU; linearity is what is tested, the bound is per megabyte.
SIZE = MB // 4
HOT_PATHS = hot_paths(SIZE)


def _cpu(fn: Callable[[str], object], text: str) -> float:
    started = time.process_time()
    fn(text)
    return time.process_time() - started


def _least_cpu(fn: Callable[[str], object], text: str, enough_s: float) -> float:
    """The least CPU seconds of up to :data:`TRIES` runs, stopping at one under ``enough_s``."""
    least = _cpu(fn, text)
    for _ in range(TRIES - 1):
        if least < enough_s:
            break
        least = min(least, _cpu(fn, text))
    return least


def _transcript(text: str) -> object:
    """What session end does to a transcript: each of four turns redacted."""
    quarter = len(text) // 4
    return [redact_secrets(text[i * quarter : (i + 1) * quarter]) for i in range(4)]


def _document(text: str) -> object:
    """A memory document as the memory service checks it: whole, lines joined."""
    return find_sensitive_document(text.replace(" ", "\n- ", 2000))


def _structured(text: str) -> object:
    return redact_structured(text), find_sensitive_text(text)


KINDS: dict[str, Callable[[str], object]] = {
    "check": find_sensitive_text,
    "redaction": redact_secrets,
    "structured": _structured,
    "transcript": _transcript,
    "memory_doc": _document,
}


def _megabytes(text: str) -> float:
    return len(text.encode()) / MB


#: Every input with every kind.
UNDER_A_SECOND = [pytest.param(kind, name, text, id=f"{name}-{kind}") for name, text in HOT_PATHS for kind in KINDS]


@pytest.mark.parametrize(("kind", "name", "text"), UNDER_A_SECOND)
def test_text_aimed_at_a_detector_costs_a_bounded_time_a_megabyte(kind: str, name: str, text: str) -> None:
    megabytes = _megabytes(text)
    assert 0.9 * SIZE / MB <= megabytes <= 1.05 * SIZE / MB, megabytes
    bound = megabytes * BOUND_S
    spent = _least_cpu(KINDS[kind], text, bound)
    assert spent < bound, f"{kind} of {name}: {spent / megabytes:.2f} s of CPU a megabyte (bound {BOUND_S} s)"


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("name", [name for name in DENSE_SECRETS if name not in dict(HOT_PATHS)])
def test_text_of_secrets_costs_a_bounded_time_a_megabyte(kind: str, name: str) -> None:
    text = DENSE_SECRETS[name](SIZE)
    assert redact_secrets(text[:200]) != text[:200]  # secrets indeed
    bound = _megabytes(text) * BOUND_S
    spent = _least_cpu(KINDS[kind], text, bound)
    assert spent < bound, f"{kind} of {name}: {spent / _megabytes(text):.2f} s of CPU a megabyte (bound {BOUND_S} s)"


#: A text four times as long costs at most this many times as much: a detector
#: whose cost grows with the square of its input (16 times) fails, noise does not.
GROWTH = 6.0


#: Cases grown from a sixteenth to a quarter megabyte, with the kind that reads
#: them the most ways.
GROWN: dict[str, tuple[str, Callable[[int], str]]] = {
    "otp_digits": ("transcript", lambda size: _sized(size, "1 ", "code is ")),
    "json_huge": ("transcript", _json_huge),
    "keyword_chain": ("redaction", lambda size: _sized(size, "pw=")),
    "letters_spelt": ("memory_doc", lambda size: _sized(size, "a ")),
    "doc_split_keywords": ("memory_doc", lambda size: _sized(size, "- 我的银行卡密码是\n- 7391\n")),
    "key_value_secrets": ("redaction", DENSE_SECRETS["key_value_secrets"]),
}


@pytest.mark.parametrize("name", list(GROWN))
def test_four_times_the_text_costs_about_four_times_the_cpu(name: str) -> None:
    kind, build = GROWN[name]
    small, large = build(SIZE // 4), build(SIZE)
    small_s = min(_cpu(KINDS[kind], small) for _ in range(TRIES))
    large_s = _least_cpu(KINDS[kind], large, GROWTH * small_s)
    assert large_s <= GROWTH * small_s, f"{name}: {large_s:.3f} s of CPU for 4 times the text of {small_s:.3f} s"
