"""Token shapes: credentials recognisable by their form alone, matched anywhere.

What: vendor keys (payment, mail, messaging, cloud, CI, package registries,
model services), private key blocks, JWTs, webhook URLs, URLs and connection
strings with a password in any position, and the Wi-Fi QR format.  Each is a
:class:`~memjobs_client.sensitive.rules.TextRule` with ``shape=True``: these
rules are also looked for inside paths, and inside decoded base64 or hex.

The shapes and names the log redaction needs as well (:data:`SK_KEY`,
:data:`JWT`, :data:`BEARER`, :data:`SECRET_WORDS`) are defined here once;
:mod:`~memjobs_client.sensitive.structured` builds its stricter patterns on them.

Why by shape: a vendor prefix followed by a long random tail (``ghp_``,
``xoxb-``, ``AKIA``, ``sk-``, ``glpat-``) is a credential whatever words
surround it, so no keyword is needed.  Prefixes that are also ordinary
words need a tail that is long, or that holds a digit.
"""

from __future__ import annotations

import re
from functools import lru_cache

from memjobs_client.sensitive.rules import (
    DIGIT,
    MARKER,
    Scanner,
    TextRule,
    gated,
    needs,
    regex_scanner,
    touching_marker,
)
from memjobs_client.sensitive.values import PLACEHOLDER

# Not preceded by a character that would make the prefix part of a longer word.
_B = r"(?<![A-Za-z0-9_\-])"
_E = r"(?![A-Za-z0-9_\-])"

# Shapes the log redaction (memjobs_client.sensitive.structured) shares.
SK_KEY = r"sk-(?:(?=[A-Za-z0-9_\-]{0,80}\d)[A-Za-z0-9_\-]{16,}|[A-Za-z0-9_\-]{20,})"
"""An ``sk-`` model-service key (OpenAI, Anthropic, DashScope): a long tail, or a
shorter one with a digit ("sk-learn-…" words are not keys)."""
JWT = r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"
"""A JSON Web Token: base64url of ``{"`` and two more parts (the signature may be
empty: an unsigned token is a credential too)."""
BEARER = r"(?<![A-Za-z0-9])(?i:bearer)"
"""The ``Bearer`` auth scheme; the token follows after white space."""
SECRET_WORDS = (
    r"api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|token|password"  # noqa: S105 - names, not a secret
    r"|passwd|pwd|secret|credential|auth|authorization|cookie|session|dsn|signature"
)
"""Words that make a name secret-like (searched, case-insensitive): ``DB_PASSWORD``,
``refresh_token``, ``X-Auth``. The values under such names are masked in logs,
and a long random value assigned to one is refused."""

# PEM blocks (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP ...) with at least some key
# material after the header, up to the END line or, if cut off, the end of text.
_PEM = (
    r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:\s|\\[nr])*(?:[A-Za-z-]+:[^\n\\]*(?:\s|\\[nr])+)*"
    r"[A-Za-z0-9+/=]{16}"
    r".*?(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
    r"|PuTTY-User-Key-File-\d+:.*?Private-Lines:\s*\d+\s*[A-Za-z0-9+/=\s]{16,}"
    r"(?:Private-MAC:[ \t]*[0-9a-fA-F]+)?"
    r"|AGE-SECRET-KEY-1[0-9A-Z]{40,}"
)

# (rule, description, pattern): vendor keys whose prefix is rare enough alone.
_VENDOR_KEYS: tuple[tuple[str, str, str], ...] = (
    (
        "aws_access_key",
        "AWS access key id",
        r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|APKA)[A-Z0-9]{16}(?![A-Za-z0-9])",
    ),
    ("github_token", "GitHub token", _B + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    (
        "gitlab_token",
        "GitLab token",
        _B + r"(?:gl(?:pat|dt|ptt|rt|oas|cbt|imt|ft|agent|soat)-[A-Za-z0-9_\-]{20,}|GR1348941[A-Za-z0-9_\-]{20,})",
    ),
    (
        "registry_token",
        "npm, PyPI, RubyGems, NuGet or Docker Hub token",
        _B + r"(?:npm_[A-Za-z0-9]{30,}|pypi-[A-Za-z0-9_\-]{40,}|rubygems_[a-f0-9]{40,}"
        r"|oy2[a-z0-9]{43}|dckr_pat_[A-Za-z0-9_\-]{20,})",
    ),
    (
        "sk_api_key",
        "OpenAI, Anthropic, DashScope, Hugging Face or other model-service key",
        _B + rf"(?:{SK_KEY}"
        r"|hf_[A-Za-z0-9]{30,}|gsk_[A-Za-z0-9]{30,}|r8_[A-Za-z0-9]{30,}|pplx-[A-Za-z0-9]{30,}"
        r"|xai-[A-Za-z0-9]{30,}|sk-ant-[A-Za-z0-9_\-]{20,})",
    ),
    (
        "stripe_key",
        "Stripe, Square, PayPal or Shopify secret",
        _B + r"(?:(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{20,}"
        r"|sq0(?:atp|csp)-[A-Za-z0-9_\-]{20,}|EAAA[A-Za-z0-9_\-]{56,}"
        r"|access_token\$(?:production|sandbox)\$[a-z0-9]{16}\$[a-f0-9]{32}"
        r"|shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32})",
    ),
    (
        "mail_key",
        "Mailgun, SendGrid, Mailchimp or Postmark key",
        r"(?<![A-Za-z0-9])(?:key-[0-9a-zA-Z]{32}|SG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}"
        r"|[0-9a-f]{32}-us\d{1,2}|[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8})(?![A-Za-z0-9])",
    ),
    ("slack_token", "Slack token", r"(?<![A-Za-z0-9])(?:xox[abpores]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9\-]{10,})"),
    (
        "telegram_bot_token",
        "Telegram bot token",
        r"(?<![0-9])\d{6,12}:(?:AA[A-Za-z0-9_\-]{30,}|[A-Za-z0-9_\-]{35})(?![A-Za-z0-9_\-])",
    ),
    ("twilio_key", "Twilio API key or account SID", r"(?<![A-Za-z0-9])(?:SK|AC)[0-9a-fA-F]{32}(?![A-Za-z0-9])"),
    (
        "discord_token",
        "Discord bot token",
        r"(?<![A-Za-z0-9])[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40}(?![A-Za-z0-9])",
    ),
    (
        "google_api_key",
        "Google API key, OAuth token or client secret",
        _B + r"(?:AIza[0-9A-Za-z_\-]{30,}|ya29\.[0-9A-Za-z_\-]{20,}|GOCSPX-[A-Za-z0-9_\-]{20,}"
        r"|1//0[0-9A-Za-z_\-]{30,})",
    ),
    (
        "cloud_key",
        "Alibaba, Tencent, Volcengine, DigitalOcean or other cloud key",
        r"(?<![A-Za-z0-9])(?:LTAI[A-Za-z0-9]{12,24}|AKID[A-Za-z0-9]{28,36}|AKLT[A-Za-z0-9_\-]{20,}"
        r"|dop_v1_[a-f0-9]{64}|do[or]_v1_[a-f0-9]{64}|hvs\.[A-Za-z0-9_\-]{20,}|hvb\.[A-Za-z0-9_\-]{20,}"
        r"|dapi[a-f0-9]{32}|glsa_[A-Za-z0-9_]{20,}|sntrys_[A-Za-z0-9_\-]{20,}|PMAK-[A-Za-z0-9\-]{20,}"
        r"|ATATT[A-Za-z0-9_\-=]{20,}|lin_api_[A-Za-z0-9]{20,}|ntn_[A-Za-z0-9]{20,}|secret_[A-Za-z0-9]{43}"
        r"|figd_[A-Za-z0-9_\-]{20,}|sbp_[a-f0-9]{40}|dp\.pt\.[A-Za-z0-9]{20,}|pul-[a-f0-9]{40})(?![A-Za-z0-9])",
    ),
    (
        "azure_storage_key",
        "Azure storage or service-bus key",
        r"(?i:AccountKey|SharedAccessKey|SharedAccessSignature)[ \t]*=[ \t]*(?P<secret>[A-Za-z0-9+/%=&:]{20,})"
        r"|(?<![A-Za-z0-9+/])(?P<secret2>[A-Za-z0-9+/]{86}==)(?![A-Za-z0-9+/=])",
    ),
    (
        "webhook_url",
        "Slack, Discord, Feishu, WeCom or DingTalk webhook URL",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9/_\-]{20,})"
        r"|discord(?:app)?\.com/api/webhooks/(?P<secret2>\d+/[A-Za-z0-9_\-]{20,})"
        r"|open\.(?:feishu\.cn|larksuite\.com)/open-apis/bot/v2/hook/(?P<secret3>[A-Za-z0-9\-]{20,})"
        r"|qyapi\.weixin\.qq\.com/cgi-bin/webhook/send\?key=(?P<secret4>[A-Za-z0-9\-]{20,})"
        r"|oapi\.dingtalk\.com/robot/send\?access_token=(?P<secret5>[A-Za-z0-9]{20,})",
    ),
    ("jwt", "JSON Web Token", JWT),
)

_URL_PLACEHOLDERS = frozenset({"password", "pass", "passwd", "pwd", "secret", "pw", "xxx", "***"})


@lru_cache(maxsize=8)
def _secret_groups(pattern: re.Pattern[str]) -> tuple[str, ...]:
    """The names of ``pattern``'s groups named ``secret…``, in their order."""
    return tuple(name for name in pattern.groupindex if name.startswith("secret"))


def _not_placeholder(match: re.Match[str]) -> bool:
    """The matched password is not a stand-in (``password``, ``****``, ``${PW}``)."""
    value = next(filter(None, map(match.group, _secret_groups(match.re))), "")
    if value == MARKER:
        return False  # a placeholder ("[…]"): a redaction's later rounds read thousands
    return value.lower() not in _URL_PLACEHOLDERS and PLACEHOLDER.fullmatch(value) is None


# scheme://user:pw@host, scheme://:pw@host, ?password=pw, ;Password=pw; and mysql -ppw.
_URL_CREDENTIALS = (
    r"\b[A-Za-z][A-Za-z0-9+.\-]{0,20}://[^\s/:@?#]*:(?P<secret>[^\s/@?#]+)@[^\s/@]"
    r"|[?&;](?i:password|passwd|pwd|pass|pw|secret|client_secret|access_token|auth_token"
    r"|api_?key|apikey|token|sig|signature|x-amz-signature|x-amz-security-token)"
    r"=(?P<secret2>[^&\s#;\"'<>]{4,})"
    r"|(?<![A-Za-z0-9])(?i:password|pwd)[ \t]*=[ \t]*(?P<secret3>[^;\s\"']{3,})(?=[ \t]*;)"
    r"|\bmysql(?:dump|admin)?\b[^\n]{0,60}?[ \t]-p(?P<secret4>[^\s\-][^\s]{3,})"
)

# Each alternative of :data:`_URL_CREDENTIALS` holds one of these as well as
# "://", "=" or "-p": a text of ``password=x`` pairs is not scanned for it.
_URL_MARKS = ("://", "?", "&", ";", "mysql")

# WIFI:T:WPA;S:home;P:secret;;  (fields in any order, ";" escaped as "\;")
_WIFI_QR = r"(?i:WIFI):[^\n]{0,300}?(?<=[:;])P:(?P<secret>(?:\\.|[^;\n])+)"


# Substrings (of the lower-cased text) without which a rule cannot match.
_GATES: dict[str, tuple[str, ...]] = {
    "azure_storage_key": ("accountkey", "sharedaccess", "=="),
    "webhook_url": ("hooks.slack", "discord", "feishu", "larksuite", "qyapi", "dingtalk"),
    "jwt": ("eyj",),
    "mail_key": ("key-", "sg.", "-us", "-"),
    "telegram_bot_token": (":",),
    "discord_token": (".",),
}


# The literal prefixes that open each alternative of a vendor pattern, after
# its look-behind: they lead the scan (:func:`~memjobs_client.sensitive.rules.regex_scanner`),
# a third of the cost or less, as the engine skips ahead to a literal but tries
# a look-behind at every position. Prefixes only: a lead that read the random
# tail too would read a long run once for every prefix in it. Patterns that
# open with a character class ("[MNO]", "\\d", hex digits) are tried
# everywhere, as before.
_LEADS: dict[str, str] = {
    "aws_access_key": r"AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|APKA",
    "github_token": r"gh[pousr]_|github_pat_",
    "gitlab_token": r"gl(?:pat|dt|ptt|rt|oas|cbt|imt|ft|agent|soat)-|GR1348941",
    "registry_token": r"npm_|pypi-|rubygems_|oy2|dckr_pat_",
    "sk_api_key": r"sk-|hf_|gsk_|r8_|pplx-|xai-",
    "slack_token": r"xox[abpores]-|xapp-",
    "twilio_key": r"(?:SK|AC)(?=[0-9a-fA-F])",  # a hex digit next: not the "AC" of every [REDACTED]
    "google_api_key": r"AIza|ya29\.|GOCSPX-|1//0",
    "cloud_key": r"LTAI|AKID|AKLT|dop_v1_|do[or]_v1_|hvs\.|hvb\.|dapi|glsa_|sntrys_|PMAK-|ATATT|lin_api_|ntn_"
    r"|secret_|figd_|sbp_|dp\.pt\.|pul-",
    "jwt": r"eyJ",
}


# For the costliest of the patterns tried at every position: the characters
# each match is made of, and its fewest (what a marker can expose: see
# :func:`~memjobs_client.sensitive.rules.touching_marker`). Their look-behinds
# and look-aheads read one character, and whatever ends such a run passes them.
_RUNS: dict[str, tuple[str, int]] = {
    "stripe_key": (r"A-Za-z0-9_$\-", 24),  # sk_live_ and 16
    "telegram_bot_token": (r"0-9:A-Za-z_\-", 39),  # 6 digits, ":", AA and 30
}


def _vendor_scanner(rule: str, pattern: str) -> Scanner:
    scan = regex_scanner(pattern, lead=_LEADS.get(rule))
    if rule == "telegram_bot_token":
        scan = needs(scan, DIGIT)
    return gated(scan, *_GATES[rule]) if rule in _GATES else scan


def _rules() -> tuple[TextRule, ...]:
    rules = [
        TextRule(
            "private_key_block",
            "PEM, OpenSSH or PuTTY private key",
            gated(regex_scanner(_PEM, re.DOTALL), "private key", "putty", "age-secret"),
            True,
        )
    ]
    rules += [
        TextRule(
            rule,
            description,
            _vendor_scanner(rule, pattern),
            True,
            touching_marker(_RUNS[rule]) if rule in _RUNS else None,
        )
        for rule, description, pattern in _VENDOR_KEYS
    ]
    rules.append(
        TextRule(
            "url_credentials",
            "URL or connection string with a password",
            gated(gated(regex_scanner(_URL_CREDENTIALS, accept=_not_placeholder), *_URL_MARKS), "://", "=", "-p"),
            True,
        )
    )
    rules.append(
        TextRule(
            "wifi_qr",
            "Wi-Fi QR code with a password",
            gated(regex_scanner(_WIFI_QR, accept=_not_placeholder), "wifi:"),
            True,
        )
    )
    return tuple(rules)


TOKEN_RULES: tuple[TextRule, ...] = _rules()
"""Every token-shape rule, in the order they are tried."""
