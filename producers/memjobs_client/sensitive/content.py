"""The content rules, in the order they are tried, and :func:`find_sensitive_text`.

Token *shapes* (PEM blocks, AWS, GitHub, Slack, ``sk-`` keys, JWTs, ...) are
matched anywhere, and are also looked for inside paths.  Long random values
assigned to a secret-like name are matched by their entropy.  Disclosures
("my password is hunter2", "密码是123456") come from
:mod:`memjobs_client.sensitive.disclosures`.
"""

from __future__ import annotations

import math
import re

from memjobs_client.sensitive.disclosures import chinese_scanner, english_scanner
from memjobs_client.sensitive.normalize import nfkc
from memjobs_client.sensitive.rules import Finding, TextRule, regex_scanner, scan_first
from memjobs_client.sensitive.values import PLACEHOLDER

# --- Token shapes ------------------------------------------------------------

# PEM blocks (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP ...) with at least some key
# material after the header, up to the END line or, if cut off, the end of text.
_PEM = (
    r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:\s|\\[nr])*(?:[A-Za-z-]+:[^\n\\]*(?:\s|\\[nr])+)*"
    r"[A-Za-z0-9+/=]{16}"
    r".*?(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
    r"|PuTTY-User-Key-File-\d+:.*?Private-Lines:\s*\d+\s*[A-Za-z0-9+/=\s]{16,}"
    r"(?:Private-MAC:[ \t]*[0-9a-fA-F]+)?"
)


def _url_password_ok(match: re.Match[str]) -> bool:
    value = match.group("secret")
    return value.lower() not in {"password", "pass", "passwd", "pwd", "secret"} and (
        PLACEHOLDER.fullmatch(value) is None
    )


# --- High-entropy assignments ------------------------------------------------

_ENTROPY_ASSIGNMENT = re.compile(
    r"""
    (?<![A-Za-z0-9_.\-])(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)["']?[ \t]*(?::=|=>|=|:)[ \t]*[rbu]?["'`]?
    (?P<secret>[A-Fa-f0-9]{32,}|[A-Za-z0-9+/]{32,}={0,2}|[A-Za-z0-9_\-]{32,})
    (?![A-Za-z0-9+/=_\-])
    """,
    re.VERBOSE,
)
_SECRET_NAME = re.compile(
    r"key|secret|token|pass|pwd|auth|credential|salt|signature|private|cookie|session",
    re.IGNORECASE,
)


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

TEXT_RULES: tuple[TextRule, ...] = (
    TextRule(
        "private_key_block",
        "PEM, OpenSSH or PuTTY private key",
        regex_scanner(_PEM, re.DOTALL),
        True,
    ),
    TextRule(
        "aws_access_key",
        "AWS access key id",
        regex_scanner(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        True,
    ),
    TextRule(
        "aws_secret_key",
        "AWS secret access key assignment",
        regex_scanner(
            r"(?i:aws[ _\-]?secret(?:[ _\-]?access)?(?:[ _\-]?key)?)[\"']?[ \t]*"
            r"(?:[:=]|=>|[ \t]is[ \t])[ \t]*[\"']?"
            r"(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
        ),
        True,
    ),
    TextRule(
        "github_token",
        "GitHub token",
        regex_scanner(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
        True,
    ),
    TextRule(
        "service_token",
        "GitLab, npm or Hugging Face token",
        regex_scanner(
            r"(?<![A-Za-z0-9_])(?:glpat-[A-Za-z0-9_\-]{20,}|npm_[A-Za-z0-9]{36,}"
            r"|hf_[A-Za-z0-9]{30,})"
        ),
        True,
    ),
    TextRule(
        "slack_token",
        "Slack token",
        regex_scanner(r"(?<![A-Za-z0-9])(?:xox[abprs]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9\-]{10,})"),
        True,
    ),
    TextRule(
        "slack_webhook",
        "Slack incoming webhook URL",
        regex_scanner(
            r"hooks\.slack\.com/services/T[A-Za-z0-9]+/B[A-Za-z0-9]+/(?P<secret>[A-Za-z0-9]{16,})"
        ),
        True,
    ),
    TextRule(
        "stripe_key",
        "Stripe secret or restricted key",
        regex_scanner(r"(?<![A-Za-z0-9_])(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
        True,
    ),
    TextRule(
        "sk_api_key",
        "OpenAI/DashScope-style sk- API key",
        regex_scanner(r"(?<![A-Za-z0-9_\-])sk-[A-Za-z0-9_\-]{20,}"),
        True,
    ),
    TextRule(
        "google_api_key",
        "Google API key",
        regex_scanner(r"(?<![A-Za-z0-9_\-])AIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"),
        True,
    ),
    TextRule(
        "jwt",
        "JSON Web Token",
        regex_scanner(r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
        True,
    ),
    TextRule(
        "url_credentials",
        "URL with an inline password",
        regex_scanner(
            r"\b[A-Za-z][A-Za-z0-9+.\-]{0,20}://[^\s/:@?#]+:(?P<secret>[^\s/@?#]+)@[^\s/@]",
            accept=_url_password_ok,
        ),
        True,
    ),
    TextRule(
        "bearer_token",
        "Bearer token",
        regex_scanner(r"(?<![A-Za-z0-9])(?i:bearer)\s+(?P<secret>[A-Za-z0-9\-._~+/]{20,}=*)"),
        True,
    ),
    TextRule(
        "basic_auth",
        "HTTP Basic credentials",
        regex_scanner(
            r"(?i:authorization)[\"']?\s*[:=]?\s*[\"']?(?i:basic)\s+"
            r"(?P<secret>[A-Za-z0-9+/]{8,}={0,2})"
        ),
        True,
    ),
    TextRule(
        "high_entropy_assignment",
        "long random value assigned to a secret-like name",
        regex_scanner(_ENTROPY_ASSIGNMENT.pattern, re.VERBOSE, accept=_entropy_ok),
        False,
    ),
    TextRule(
        "zh_password_phrase",
        "Chinese password, key or code disclosure",
        chinese_scanner,
        False,
    ),
    TextRule(
        "password_assignment",
        "password or PIN disclosure",
        english_scanner(frozenset({"password", "pin"})),
        False,
    ),
    TextRule(
        "secret_assignment",
        "API key, token, secret or credential disclosure",
        english_scanner(frozenset({"compound", "ambiguous"})),
        False,
    ),
)


def find_sensitive_text(text: str) -> Finding | None:
    """The first content rule that ``text`` matches, or ``None``."""
    if not text:
        return None
    return scan_first(nfkc(text), TEXT_RULES)
