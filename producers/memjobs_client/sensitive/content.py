"""The content rules, in the order they are tried, and :func:`find_sensitive_text`.

1. Token *shapes* (:mod:`~memjobs_client.sensitive.shapes`: vendor keys, PEM
   blocks, JWTs, URLs with passwords, Wi-Fi QR codes), matched anywhere and
   also inside paths;
2. numbers (:mod:`~memjobs_client.sensitive.numbers`: cards, identity
   numbers, one-time codes), long random values assigned to a secret-like
   name (by their entropy), and disclosures in English
   (:mod:`~memjobs_client.sensitive.disclosures`) and Chinese
   (:mod:`~memjobs_client.sensitive.zh`);
3. disguises (:mod:`~memjobs_client.sensitive.encoded`): a token broken by
   spaces, or a secret in base64 or hex.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

from memjobs_client.sensitive.disclosures import SEED_PHRASE, english_scanner, reverse_scanner
from memjobs_client.sensitive.encoded import ENCODED_RUNS, encoded_scanner, letter_spaced_scanner, spaced_scanner
from memjobs_client.sensitive.normalize import nfkc
from memjobs_client.sensitive.numbers import NUMBER_RULES
from memjobs_client.sensitive.rules import (
    Finding,
    TextRule,
    gated,
    needs,
    regex_scanner,
    scan_first,
)
from memjobs_client.sensitive.seeds import SEED_RUN, seed_phrase_scanner
from memjobs_client.sensitive.shapes import BEARER, SECRET_WORDS, TOKEN_RULES
from memjobs_client.sensitive.zh import chinese_reverse_scanner, chinese_scanner

# --- High-entropy assignments ------------------------------------------------

_ENTROPY_ASSIGNMENT = re.compile(
    r"""
    (?<![A-Za-z0-9_.\-])(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)["']?[ \t]*(?::=|=>|=|:)[ \t]*[rbu]?["'`]?
    (?P<secret>[A-Fa-f0-9]{32,}|[A-Za-z0-9+/]{32,}={0,2}|[A-Za-z0-9_\-]{32,})
    (?![A-Za-z0-9+/=_\-])
    """,
    re.VERBOSE,
)
# A run of 32 of the characters every value of _ENTROPY_ASSIGNMENT is made of,
# found from where a run starts (one try a run, not one a character).
_LONG_RUN = (r"[^A-Za-z0-9+/_\-][A-Za-z0-9+/_\-]{32}", r"\A[A-Za-z0-9+/_\-]{32}")
# Wider than the names alone: a long random value is evidence enough.
_SECRET_NAME = re.compile(rf"{SECRET_WORDS}|key|pass|salt|private", re.IGNORECASE)


def _shannon(value: str) -> float:
    counts: dict[str, int] = {}
    for char in value:
        counts[char] = counts.get(char, 0) + 1
    total = len(value)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def _entropy_ok(match: re.Match[str]) -> bool:
    if _SECRET_NAME.search(match.group("name")) is None:
        return False
    value = match.group("secret")
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    if "_" in value or "-" in value:
        # snake_case or slug words ("user_profile_settings_v2") are not keys;
        # Django's "django-insecure-..." style keys still have high entropy.
        words = re.split(r"[_\-]", value)
        if max(len(w) for w in words) < 16:
            return False
    return _shannon(value) >= 3.0


# --- The rules, in the order they are tried -----------------------------------

_BEARER = TextRule(
    "bearer_token",
    "Bearer token",
    gated(regex_scanner(BEARER + r"\s+(?P<secret>[A-Za-z0-9\-._~+/]{20,}=*)"), "bearer"),
    True,
)
_BASIC = TextRule(
    "basic_auth",
    "HTTP Basic credentials",
    gated(
        regex_scanner(r"(?i:authorization)[\"']?\s*[:=]?\s*[\"']?(?i:basic)\s+(?P<secret>[A-Za-z0-9+/]{8,}={0,2})"),
        "basic",
    ),
    True,
)
_AWS_SECRET = TextRule(
    "aws_secret_key",
    "AWS secret access key",
    gated(
        regex_scanner(
            r"(?i:aws[ _\-]?secret(?:[ _\-]?access)?(?:[ _\-]?key)?|secret[ _\-]?access[ _\-]?key)[\"']?[ \t]*"
            r"(?:[:=]|=>|[ \t]is[ \t])[ \t]*[\"']?(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
            r"|(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}[^\n]{1,60}?(?<![A-Za-z0-9/+=])"
            r"(?P<secret2>(?=[A-Za-z0-9/+]*[0-9/+])(?=[A-Za-z0-9/+]*[a-z])[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        "secret",
        "akia",
        "asia",
    ),  # each of the first alternative's names holds "secret"
    True,
)
_ENTROPY = TextRule(
    "high_entropy_assignment",
    "long random value assigned to a secret-like name",
    gated(needs(regex_scanner(_ENTROPY_ASSIGNMENT.pattern, re.VERBOSE, accept=_entropy_ok), *_LONG_RUN), "=", ":"),
    False,
)

# Words one of which a disclosure needs (substring tests, on lower-cased text).
_ZH_GATE = ("密", "口令", "令牌", "码", "碼", "钥", "鑰", "暗号", "暗號")
_PASSWORD_GATE = ("pass", "pw", "psk", "pin", "key", "p@", "p4", "pa$", "p@$")

# Whose password a value-first disclosure names ("… is my password", "it's
# hunter2, the pin"): one of these words ("your" holds "our", "their" "the").
# A C scan of every word start otherwise, 0.06 s a megabyte of JSON.
_OWNER_GATE = ("my", "our", "his", "her", "the", "mom's", "dad's")

SHAPE_RULES: tuple[TextRule, ...] = (*TOKEN_RULES, _AWS_SECRET, _BEARER, _BASIC)
"""Rules that need no keyword; also run inside paths and decoded text."""

DISCLOSURE_RULES: tuple[TextRule, ...] = (
    _ENTROPY,
    TextRule(
        "zh_password_phrase", "Chinese password, key or code disclosure", gated(chinese_scanner, *_ZH_GATE), False
    ),
    TextRule(
        "zh_password_phrase",
        "Chinese password, key or code disclosure",
        gated(chinese_reverse_scanner, *_ZH_GATE),
        False,
    ),
    TextRule(
        "password_assignment",
        "password or PIN disclosure",
        gated(english_scanner(frozenset({"password", "pin", "short"})), *_PASSWORD_GATE),
        False,
    ),
    TextRule(
        "password_assignment",
        "password or PIN disclosure",
        gated(gated(reverse_scanner, *_PASSWORD_GATE), *_OWNER_GATE),
        False,
    ),
    TextRule(
        "secret_assignment",
        "API key, token, secret or credential disclosure",
        gated(english_scanner(frozenset({"compound", "ambiguous", "key"})), "secret", "token", "key", "cred"),
        False,
    ),
    TextRule(
        "seed_phrase",
        "wallet seed or recovery phrase",
        gated(regex_scanner(SEED_PHRASE.pattern), "phrase", "words", "mnemonic", "助记词"),
        False,
    ),
    TextRule("seed_phrase", "wallet seed or recovery phrase", seed_phrase_scanner, False, SEED_RUN),
    *NUMBER_RULES,
)
"""Rules that need words around the value: numbers, disclosures, assignments."""


def _inner(text: str) -> bool:
    return scan_first(nfkc(text), SHAPE_RULES + DISCLOSURE_RULES) is not None


def _inner_spans(text: str) -> Iterator[tuple[int, int]]:
    for rule in SHAPE_RULES + DISCLOSURE_RULES:
        yield from rule.scan(text)


def _shapes(text: str) -> bool:
    return scan_first(text, SHAPE_RULES) is not None


TEXT_RULES: tuple[TextRule, ...] = (
    *SHAPE_RULES,
    *DISCLOSURE_RULES,
    TextRule("spaced_token", "credential broken up by spaces or line breaks", spaced_scanner(_shapes), True),
    TextRule("encoded_secret", "credential hidden in base64 or hex", encoded_scanner(_inner), True, ENCODED_RUNS),
    TextRule("spelt_out", "credential spelt out letter by letter", letter_spaced_scanner(_inner_spans), False),
)
"""Every content rule, in the order they are tried."""


def find_sensitive_text(text: str) -> Finding | None:
    """The first content rule that ``text`` matches, or ``None``."""
    if not text:
        return None
    return scan_first(nfkc(text), TEXT_RULES)
