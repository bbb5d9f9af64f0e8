"""Redaction: secrets masked, user content omitted, before anything is logged.

Why: the workers handle a voice assistant's memory (transcripts, replies,
memory texts and the people they belong to), and logs end up in places with
weaker access control than the database, so:

* Secrets are redacted before anything is written, by value as well as by
  key, with the patterns of the producers' credential check
  (:mod:`memjobs_client.sensitive`, their one source): every string (message,
  extra value, traceback) goes through the same rules that refuse credentials
  at the producers (:func:`~memjobs_client.sensitive.redact_secrets`), so a
  vendor key, a JWT, a private key block or "my password is …" is masked
  whatever key it sits under and whatever library or exception put it there.
  :func:`redact` walks dicts/lists and replaces the value of any key that
  looks like an API key, token, ``Authorization`` header, cookie, password,
  secret, credential, private key or DSN by ``"[REDACTED]"``
  (:func:`~memjobs_client.sensitive.is_secret_key`).  Inside
  *strings* (messages, tracebacks, extra values) :func:`redact_text` first
  masks what machine text carries
  (:func:`~memjobs_client.sensitive.redact_structured`): URL
  credentials (``scheme://user:pass@``), ``Bearer`` tokens,
  ``Authorization:``/``Cookie:`` headers, ``key=value`` secrets
  (``?password=…``, ``&token=…``, ``api_key=…``), quoted mapping entries
  (``'api_key': '…'``) and ``sk-…`` keys.
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
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from memjobs_client.sensitive import REDACTED, is_secret_key, redact_secrets, redact_structured

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


def redact_text(text: str) -> str:
    """Mask secrets inside free text (messages, tracebacks, string values): where
    machine text puts them (:func:`~memjobs_client.sensitive.redact_structured`:
    ``password=…``, headers, URL user info, ``Bearer …``) and then by value, with
    the same rules the producers refuse content with
    (:func:`memjobs_client.sensitive.redact_secrets`: vendor keys, JWTs, private
    key blocks, card numbers, passwords in prose, ...)."""
    text = redact_structured(text)
    if len(text) > _MAX_VALUE_SCAN_CHARS:
        # A huge blob (a dumped payload): scanned in pieces, each redacted on its own.
        return "".join(
            redact_secrets(text[i : i + _MAX_VALUE_SCAN_CHARS]) for i in range(0, len(text), _MAX_VALUE_SCAN_CHARS)
        )
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


def scrub(value: Any, *, omit_text: bool, depth: int = 0) -> Any:  # noqa: C901 - one flat dispatch on the value's type
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
            if is_secret_key(key):
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


_SECRET_PARAMS = {"password", "pass", "passwd", "pwd", "sslpassword", "secret", "token", "api_key"}


def redact_url(url: str) -> str:
    """Hide the password of ``scheme://user:password@host`` and of secret query
    parameters (``?password=…``: libpq and redis-py accept both forms), keeping
    the rest readable: for logs, errors and ``memjobs config``."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        creds, _, host = netloc.rpartition("@")
        if ":" in creds:
            netloc = f"{creds.split(':', 1)[0]}:[REDACTED]@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "[REDACTED]" if k.lower() in _SECRET_PARAMS else v) for k, v in pairs], safe="[]")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
