"""Redaction: secrets masked, user content omitted, before anything is logged.

Why: the workers handle a voice assistant's memory (transcripts, replies,
memory texts and the people they belong to), and logs end up in places with
weaker access control than the database, so:

* Secrets are redacted before anything is written, by value as well as by
  key: every string (message, extra value, traceback) goes through the same
  detector that refuses credentials at the producers, so a vendor key, a
  private key block or "my password is …" is masked whatever key it sits
  under and whatever library or exception put it there.  :func:`redact` walks
  dicts/lists and replaces the value of any key that looks like an API key,
  token, ``Authorization`` header, cookie, password, secret, credential,
  private key or DSN by ``"[REDACTED]"``.  Inside *strings* (messages,
  tracebacks, extra values) :func:`redact_text` masks URL credentials
  (``scheme://user:pass@``), ``Bearer`` tokens, ``Authorization:``/``Cookie:``
  headers, ``key=value`` secrets (``?password=…``, ``&token=…``,
  ``api_key=…``), quoted mapping entries (``'api_key': '…'``), OpenAI-style
  ``sk-…`` keys and JWTs as well.
* User content is never logged.  ``extra=`` fields named in
  :data:`TEXT_FIELDS` (transcript, reply, memory text, task result, owner id,
  …) are always replaced by ``"[omitted]"``, at any nesting depth (see
  :func:`scrub`).  There is deliberately no switch to turn this off: a debug
  flag that logs user text tends to be left on in production.  Owner ids are
  also omitted (code should log ``owner_key``, a sha256, instead);
  ``user_id`` is treated the same, because mem0 calls the owner id
  ``user_id``.

The redaction is a safety net, not a licence: do not log user content or
secrets on purpose and rely on it to catch them.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from memjobs_client.sensitive import redact_secrets

REDACTED: Final = "[REDACTED]"
OMITTED: Final = "[omitted]"

#: ``extra=`` fields with these names never reach the log (privacy by default).
TEXT_FIELDS: Final = frozenset(
    {
        "text",
        "transcript",
        "reply",
        "memory",
        "memory_text",
        "content",
        "query",
        "result",
        "owner_id",
        "messages",
        "prompt",
    }
)
# mem0's name for the owner id; omitted like owner_id.
_OMITTED_FIELDS: Final = TEXT_FIELDS | {"user_id"}

_MAX_DEPTH: Final = 12
# The value detector runs on pieces of at most this many characters.
_MAX_VALUE_SCAN_CHARS: Final = 64 * 1024

# Key names whose values are secrets (searched, case-insensitive).
_SECRET_KEY_RE: Final = re.compile(
    r"api[_-]?key|key$|token|authorization|auth|cookie|set-cookie|password|passwd"
    r"|pwd|secret|credential|private[_-]?key|dsn",
    re.IGNORECASE,
)
# Names that match the pattern above but are known not to be secrets.
# ``owner_key`` is the sha256 the project logs *instead of* the owner id;
# token counts are usage metrics.
_NOT_SECRET_KEY_RE: Final = re.compile(
    r"(owner|lock|idempotency|dedupe?|cache|queue|sort|partition)_key"
    r"|(prompt|completion|total|input|output|max|reasoning|cached)_tokens",
    re.IGNORECASE,
)

# --- string redaction ------------------------------------------------------

_SECRET_WORDS: Final = (
    r"api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|token|password"
    r"|passwd|pwd|secret|credential|auth|authorization|cookie|session|dsn|signature"
)

# Key/value patterns match *any* key name and _mask_values() decides whether
# it is a secret.  Two reasons: a pattern like [\w]*secret[\w]* backtracks
# quadratically on long words (log lines can hold long blobs), and the value
# of a non-secret key is left unconsumed so that secrets nested in it
# ("url=https://h/?token=x") are still found.
_SECRET_WORD_RE: Final = re.compile(_SECRET_WORDS, re.IGNORECASE)

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
# scheme://user:pass@host -> scheme://[REDACTED]@host
_URL_CRED_RE: Final = re.compile(
    r"(?<![a-z0-9+.\-])(?P<scheme>[a-z][a-z0-9+.\-]*+://)[^\s/?#]+@", re.IGNORECASE
)
_BEARER_RE: Final = re.compile(r"\b(?P<b>bearer)\s+[^\s,;'\"]+", re.IGNORECASE)
_OPENAI_KEY_RE: Final = re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}")
_JWT_RE: Final = re.compile(r"\beyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*")


def _is_secret_key(name: str) -> bool:
    """Key name of a mapping (``_SECRET_KEY_RE``, includes ``...key``)."""
    return bool(_SECRET_KEY_RE.search(name)) and not _NOT_SECRET_KEY_RE.fullmatch(name)


def _is_secret_word(name: str) -> bool:
    """Key name inside free text (narrower: no bare ``...key``)."""
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


def redact_text(text: str) -> str:
    """Mask secrets inside free text (messages, tracebacks, string values): by
    key (``password=…``, headers, URL credentials) and then by value, with the
    same detector the producers refuse content with
    (:func:`memjobs_client.sensitive.redact_secrets`: vendor keys, private key
    blocks, card numbers, passwords in prose, ...)."""
    text = _mask_values(text, _QUOTED_KEY_RE, _QUOTED_VALUE_RE)
    text = _HEADER_RE.sub(lambda m: f"{m['k']}{m['sep']}{REDACTED}", text)
    text = _URL_CRED_RE.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _BEARER_RE.sub(lambda m: f"{m['b']} {REDACTED}", text)
    text = _mask_values(text, _KV_KEY_RE, _KV_VALUE_RE)
    text = _OPENAI_KEY_RE.sub(f"sk-{REDACTED}", text)
    text = _JWT_RE.sub(REDACTED, text)
    if len(text) > _MAX_VALUE_SCAN_CHARS:
        # A huge blob (a dumped payload): scanned in pieces, each redacted on its own.
        return "".join(redact_secrets(text[i:i + _MAX_VALUE_SCAN_CHARS])
                       for i in range(0, len(text), _MAX_VALUE_SCAN_CHARS))
    return _redact_values(text)


# Short strings found clean, remembered so that the log lines every job writes
# ("job done", actor names, outcomes) are scanned once.  Only clean strings are
# kept: a string that held a secret is never cached.
_CLEAN: dict[str, None] = {}
_CLEAN_MAX_ENTRIES: Final = 4096
_CLEAN_MAX_CHARS: Final = 256


# Values no content rule can match: a UUID (message ids), a short number, a
# lower-case identifier (actor names, outcomes, reasons).
_PLAIN_VALUE: Final = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|-?[0-9]{1,12}(?:\.[0-9]+)?|[a-z][a-z_]{0,39}"
)


def _redact_values(text: str) -> str:
    if text in _CLEAN or _PLAIN_VALUE.fullmatch(text):
        return text
    redacted = redact_secrets(text)
    if redacted == text and len(text) <= _CLEAN_MAX_CHARS:
        if len(_CLEAN) >= _CLEAN_MAX_ENTRIES:
            _CLEAN.clear()
        _CLEAN[text] = None
    return redacted


def scrub(value: Any, *, omit_text: bool, depth: int = 0) -> Any:
    """Return a JSON-ready copy of ``value`` with secrets (and text) removed.

    Secret-looking keys get ``"[REDACTED]"``; with ``omit_text``, fields named
    in :data:`TEXT_FIELDS` (and ``user_id``) get ``"[omitted]"``.  Nesting is cut
    off below ``_MAX_DEPTH`` levels.
    """
    if depth > _MAX_DEPTH:
        return "[too deep]"
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{type(value).__name__} len={len(value)}>"  # could be anything
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = str(k)
            if _is_secret_key(key):
                out[key] = REDACTED
            elif omit_text and key in _OMITTED_FIELDS:
                out[key] = OMITTED
            else:
                out[key] = scrub(v, omit_text=omit_text, depth=depth + 1)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        return [scrub(v, omit_text=omit_text, depth=depth + 1) for v in value]
    # Structured objects are walked as dicts so their field names are checked
    # (str() of a pydantic model or dataclass would print every field).
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump) and not isinstance(value, type):
        try:
            dumped = model_dump(mode="json")
        except Exception:  # noqa: BLE001 - logging must not raise
            dumped = None
        if isinstance(dumped, Mapping):
            return scrub(dumped, omit_text=omit_text, depth=depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
        return scrub(fields, omit_text=omit_text, depth=depth + 1)
    try:
        return redact_text(str(value))
    except Exception:  # noqa: BLE001 - logging must not raise
        return f"<unprintable {type(value).__name__}>"


def redact(value: Any) -> Any:
    """Recursively redact secrets in dicts/lists/strings.

    Mapping keys that look like secrets (API keys, tokens, Authorization,
    cookies, passwords, secrets, credentials, private keys, DSNs) get the value
    ``"[REDACTED]"``; strings go through :func:`redact_text`.  Returns a new,
    JSON-serialisable object; the input is not modified.
    """
    return scrub(value, omit_text=False)
