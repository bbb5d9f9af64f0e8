"""Secrets where machine text puts them: under a secret-like name, in a header,
in a URL's user info, after an auth scheme.

What: :func:`is_secret_key` says whether a mapping key names a secret;
:func:`redact_structured` masks, inside free text, the value of every
``key=value`` and ``"key": value`` whose key names a secret (``?password=…``,
``api_key=…``, ``'token': '…'``), ``Authorization:``/``Cookie:`` headers to the
end of the line, URL user info (``scheme://user:pass@`` becomes
``scheme://[REDACTED]@``), the value after ``Bearer`` and ``sk-…`` keys (the
``sk-`` kept). The names, ``sk-`` keys and the ``Bearer`` scheme are those of
:mod:`~memjobs_client.sensitive.shapes`, which the content rules use too.

Why apart from the content rules: these are stricter, for text written by
programs (log lines, tracebacks, URLs, headers), where any value under
``password=`` or after ``Bearer`` is a secret whatever it looks like, and
masking one by mistake costs nothing. Said by a person, "the bearer of bad
news" or "pass=3" is not a credential, so the refusal
(:func:`~memjobs_client.sensitive.find_sensitive_text`) does not use them.
Token shapes (JWTs, vendor keys) are the content rules' alone:
:func:`~memjobs_client.sensitive.redact_secrets` finds them wherever they sit.

Every pattern here runs in linear time (possessive quantifiers, and a key
pattern that matches any name, judged afterwards): log lines can hold long
blobs.
"""

from __future__ import annotations

import re
from typing import Final

from memjobs_client.sensitive.redact import REDACTED
from memjobs_client.sensitive.shapes import BEARER, SECRET_WORDS, SK_KEY

# Mapping keys: also any name ending in "key" ("openaiApiKey"), but not "session".
_SECRET_KEY_RE: Final = re.compile(
    r"api[_-]?key|key$|token|authorization|auth|cookie|set-cookie|password|passwd"
    r"|pwd|secret|credential|private[_-]?key|dsn",
    re.IGNORECASE,
)
# Names that match the patterns above but are known not to be secrets.
# ``owner_key`` is the sha256 the project logs *instead of* the owner id;
# token counts are usage metrics.
_NOT_SECRET_KEY_RE: Final = re.compile(
    r"(owner|lock|idempotency|dedupe?|cache|queue|sort|partition)_key"
    r"|(prompt|completion|total|input|output|max|reasoning|cached)_tokens",
    re.IGNORECASE,
)
_SECRET_WORD_RE: Final = re.compile(SECRET_WORDS, re.IGNORECASE)

# Key/value patterns match *any* key name and _mask_values() decides whether
# it is a secret.  Two reasons: a pattern like [\w]*secret[\w]* backtracks
# quadratically on long words, and the value of a non-secret key is left
# unconsumed so that secrets nested in it ("url=https://h/?token=x") are
# still found.
# 'api_key': 'x'   "password": "x"   (repr of dicts, JSON embedded in text)
_QUOTED_KEY_RE: Final = re.compile(r"(?P<q>[\"'])(?P<k>[\w.\-]++)(?P=q)\s*+:\s*+")
_QUOTED_VALUE_RE: Final = re.compile(r"\"(?:[^\"\\]|\\.)*+\"|'(?:[^'\\]|\\.)*+'|[^\s,}\]]++")
# ?password=x  &token=x  api_key=x  DB_PASSWORD = "x"
_KV_KEY_RE: Final = re.compile(r"(?<![\w.\-])(?P<k>[\w.\-]++)[ \t]*+=[ \t]*+")
_KV_VALUE_RE: Final = re.compile(r"\"[^\"]*+\"|'[^']*+'|[^\s&;,'\"]++")
# Authorization: Basic xxx     Cookie: a=b; c=d     (redacted to end of line)
_HEADER_RE: Final = re.compile(
    r"(?P<k>\b(?:proxy-)?authorization|\b(?:set-)?cookie|\bx-api-key|\bapi-key"
    r"|\bx-auth-token)(?P<sep>[ \t]*:[ \t]*)(?P<v>[^\r\n]+)",
    re.IGNORECASE,
)
# scheme://user:pass@host -> scheme://[REDACTED]@host (the user name too)
_URL_USER_INFO_RE: Final = re.compile(r"(?<![a-z0-9+.\-])(?P<scheme>[a-z][a-z0-9+.\-]*+://)[^\s/?#]+@", re.IGNORECASE)
# Bearer <anything>: in machine text the scheme says what follows.
_BEARER_RE: Final = re.compile(rf"(?P<b>{BEARER})\s+[^\s,;'\"]+")
_SK_KEY_RE: Final = re.compile(rf"\b{SK_KEY}")


def is_secret_key(name: str) -> bool:
    """Whether the key ``name`` of a mapping names a secret (``api_key``,
    ``Authorization``, ``openaiApiKey``; not ``owner_key`` or ``prompt_tokens``)."""
    return bool(_SECRET_KEY_RE.search(name)) and not _NOT_SECRET_KEY_RE.fullmatch(name)


def _is_secret_word(name: str) -> bool:
    """Key name inside free text (narrower than :func:`is_secret_key`: no bare ``...key``)."""
    return bool(_SECRET_WORD_RE.search(name)) and not _NOT_SECRET_KEY_RE.fullmatch(name)


def _mask_values(text: str, key_re: re.Pattern[str], value_re: re.Pattern[str]) -> str:
    """Replace the value after each secret-looking key found by ``key_re``."""
    parts: list[str] = []
    pos = 0
    for m in key_re.finditer(text):
        if m.start() < pos or not _is_secret_word(m["k"]):
            continue
        value = value_re.match(text, m.end())
        if value is None:
            continue
        quote = value[0][0] if value[0][0] in "'\"" and len(value[0]) > 1 else ""
        parts += [text[pos : m.end()], quote, REDACTED, quote]
        pos = value.end()
    if not parts:
        return text
    parts.append(text[pos:])
    return "".join(parts)


def redact_structured(text: str) -> str:
    """``text`` with the secrets of machine text masked (see the module docstring);
    the key, the header name, the scheme and quotes are kept."""
    text = _mask_values(text, _QUOTED_KEY_RE, _QUOTED_VALUE_RE)
    text = _HEADER_RE.sub(lambda m: f"{m['k']}{m['sep']}{REDACTED}", text)
    text = _URL_USER_INFO_RE.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _BEARER_RE.sub(lambda m: f"{m['b']} {REDACTED}", text)
    text = _mask_values(text, _KV_KEY_RE, _KV_VALUE_RE)
    return _SK_KEY_RE.sub(f"sk-{REDACTED}", text)
