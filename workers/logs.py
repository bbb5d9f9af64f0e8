"""JSON Lines logging with secret redaction and privacy-by-default.

What
----
``configure_logging()`` installs a single handler on the root logger that
writes one JSON object per line (``ensure_ascii=False``) using
:class:`JsonFormatter`.  Every record carries ``ts`` (ISO-8601 UTC with
milliseconds and a ``Z``), ``level``, ``logger``, ``msg``, ``pid``, ``thread``,
every ``extra=`` field of the log call and, when ``exc_info`` is given,
``exc_type`` and ``exc`` (the formatted traceback).

Why
---
The workers handle a voice assistant's memory: transcripts, replies, memory
texts and the people they belong to.  Logs end up in places with weaker access
control than the database, so:

* Secrets are redacted before anything is written.  :func:`redact` walks
  dicts/lists and replaces the value of any key that looks like an API key,
  token, ``Authorization`` header, cookie, password, secret, credential,
  private key or DSN by ``"[REDACTED]"``.  Inside *strings* (messages,
  tracebacks, extra values) URL credentials (``scheme://user:pass@``),
  ``Bearer`` tokens, ``Authorization:``/``Cookie:`` headers, ``key=value``
  secrets (``?password=…``, ``&token=…``, ``api_key=…``), quoted mapping
  entries (``'api_key': '…'``), OpenAI-style ``sk-…`` keys and JWTs are
  masked as well.
* User content is never logged.  ``extra=`` fields named in
  :data:`TEXT_FIELDS` (transcript, reply, memory text, task result, owner id,
  …) are always replaced by ``"[omitted]"``, at any nesting depth.  There is
  deliberately no switch to turn this off: a debug flag that logs user text
  tends to be left on in production.  Owner ids are also omitted (code should
  log ``owner_key``, a sha256, instead); ``user_id`` is treated the same,
  because mem0 calls the owner id ``user_id``.
* Records from ``mem0`` loggers are reduced to a fixed message.  mem0 logs
  memory text in its messages (e.g. ``"Skipping duplicate memory: <text>"``),
  often via f-strings, so neither the format string nor its arguments can be
  trusted.  Only ``level``/``logger``/``exc_type`` survive, not the traceback.

The redaction is a safety net, not a licence: do not log user content or
secrets on purpose and rely on it to catch them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import sys
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any, Final

__all__ = [
    "NOISY_LOGGERS",
    "OMITTED",
    "REDACTED",
    "TEXT_FIELDS",
    "JsonFormatter",
    "configure_logging",
    "redact",
    "redact_text",
]

REDACTED: Final = "[REDACTED]"
OMITTED: Final = "[omitted]"
MEM0_SUPPRESSED_MSG: Final = "mem0 log record suppressed (may contain memory text)"

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

#: Third-party loggers capped at WARNING by :func:`configure_logging`.
NOISY_LOGGERS: Final = (
    "mem0",
    "httpx",
    "httpcore",
    "openai",
    "urllib3",
    "posthog",
    "pgserver",
    "alembic",
)

_MAX_DEPTH: Final = 12

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
    """Mask secrets inside free text (messages, tracebacks, string values)."""
    text = _mask_values(text, _QUOTED_KEY_RE, _QUOTED_VALUE_RE)
    text = _HEADER_RE.sub(lambda m: f"{m['k']}{m['sep']}{REDACTED}", text)
    text = _URL_CRED_RE.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _BEARER_RE.sub(lambda m: f"{m['b']} {REDACTED}", text)
    text = _mask_values(text, _KV_KEY_RE, _KV_VALUE_RE)
    text = _OPENAI_KEY_RE.sub(f"sk-{REDACTED}", text)
    return _JWT_RE.sub(REDACTED, text)


def _scrub(value: Any, *, omit_text: bool, depth: int = 0) -> Any:
    """Return a JSON-ready copy of ``value`` with secrets (and text) removed."""
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
                out[key] = _scrub(v, omit_text=omit_text, depth=depth + 1)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        return [_scrub(v, omit_text=omit_text, depth=depth + 1) for v in value]
    # Structured objects are walked as dicts so their field names are checked
    # (str() of a pydantic model or dataclass would print every field).
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump) and not isinstance(value, type):
        try:
            dumped = model_dump(mode="json")
        except Exception:  # noqa: BLE001 - logging must not raise
            dumped = None
        if isinstance(dumped, Mapping):
            return _scrub(dumped, omit_text=omit_text, depth=depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
        return _scrub(fields, omit_text=omit_text, depth=depth + 1)
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
    return _scrub(value, omit_text=False)


# --- formatter / handler ---------------------------------------------------

# Attributes every LogRecord has; anything else came from ``extra=``.
_RESERVED_ATTRS: Final = frozenset(
    logging.LogRecord("", logging.INFO, "", 0, "", (), None).__dict__
) | {"message", "asctime", "taskName"}


# Fields written by the formatter itself; extras with these names are renamed.
_OWN_FIELDS: Final = frozenset(
    {"ts", "level", "logger", "msg", "pid", "thread", "exc_type", "exc", "stack"}
)


def _exc_type_name(exc_type: type[BaseException] | None) -> str | None:
    if exc_type is None:
        return None
    if exc_type.__module__ == "builtins":
        return exc_type.__qualname__
    return f"{exc_type.__module__}.{exc_type.__qualname__}"


def _is_mem0(name: str) -> bool:
    return name.startswith("mem0")


def _message_without_payloads(record: logging.LogRecord) -> str:
    """The record's message with any Dramatiq message among its arguments shown
    as ``actor#message_id``: Dramatiq logs ``Failed to process message %s``
    with the message's repr, which carries the payload (source text, transcripts)."""
    args = record.args
    if not args or not isinstance(args, tuple):
        return record.getMessage()
    if not any(_is_dramatiq_message(a) for a in args):
        return record.getMessage()
    safe = tuple(
        f"{getattr(a, 'actor_name', '?')}#{getattr(a, 'message_id', '?')}" if _is_dramatiq_message(a) else a
        for a in args
    )
    msg = str(record.msg)
    try:
        return msg % safe
    except (TypeError, ValueError):
        return msg


def _is_dramatiq_message(value: object) -> bool:
    return hasattr(value, "actor_name") and hasattr(value, "message_id") and hasattr(value, "args")


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON object (no newline), redacted.

    Core fields: ``ts``, ``level``, ``logger``, ``msg``, ``pid``, ``thread``;
    then every ``extra=`` field (an extra named like a core field is renamed
    ``extra_<name>``); then ``exc_type``/``exc`` and ``stack`` when present.
    """

    def format(self, record: logging.LogRecord) -> str:
        try:
            return json.dumps(self._build(record), ensure_ascii=False, allow_nan=False)
        except Exception as exc:  # noqa: BLE001 - a log call must never crash the worker
            return json.dumps(
                {
                    **self._core(record, "log record could not be formatted"),
                    "format_error": _exc_type_name(type(exc)),
                },
                ensure_ascii=False,
            )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        ts = datetime.fromtimestamp(record.created, tz=UTC)
        return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def _core(self, record: logging.LogRecord, msg: str) -> dict[str, Any]:
        return {
            "ts": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": msg,
            "pid": record.process if record.process is not None else os.getpid(),
            "thread": record.threadName,
        }

    def _build(self, record: logging.LogRecord) -> dict[str, Any]:
        exc_info = record.exc_info
        if _is_mem0(record.name):
            out = self._core(record, MEM0_SUPPRESSED_MSG)
            if exc_info and exc_info[0] is not None:
                out["exc_type"] = _exc_type_name(exc_info[0])
            return out

        out = self._core(record, redact_text(_message_without_payloads(record)))
        extras = {
            k: v
            for k, v in record.__dict__.items()
            if k not in _RESERVED_ATTRS and not k.startswith("_")
        }
        for key, value in _scrub(extras, omit_text=True).items():
            out[f"extra_{key}" if key in _OWN_FIELDS else key] = value

        if exc_info and exc_info[0] is not None:
            out["exc_type"] = _exc_type_name(exc_info[0])
            out["exc"] = redact_text("".join(traceback.format_exception(*exc_info)).rstrip("\n"))
        elif record.exc_text:
            out["exc"] = redact_text(record.exc_text)
        if record.stack_info:
            out["stack"] = redact_text(self.formatStack(record.stack_info))
        return out


class _JsonLinesHandler(logging.StreamHandler[IO[str]]):
    """Marker subclass so :func:`configure_logging` can find its own handler."""


def _parse_level(level: str) -> int:
    value = logging.getLevelName(str(level).strip().upper())
    if isinstance(value, int):
        return value
    raise ValueError(f"unknown log level: {level!r}")


def configure_logging(
    *, level: str = "INFO", stream: IO[str] | None = None, adopt: bool = False
) -> None:
    """Send all logging to ``stream`` (default ``sys.stderr``) as JSON Lines.

    Idempotent: a second call reuses the handler installed by the first one
    (updating its stream and the root level) instead of adding another.
    Other handlers already on the root logger are left alone, unless ``adopt``:
    then, if the root logger has handlers (a Dramatiq worker process logs
    through a pipe to its parent), they are given the JSON formatter instead of
    a second handler being added, so every record is written once, as JSON.
    """
    root = logging.getLogger()
    root.setLevel(_parse_level(level))
    if adopt and root.handlers:
        for existing in root.handlers:
            existing.setFormatter(JsonFormatter())
        for name in NOISY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        return
    target = stream if stream is not None else sys.stderr

    ours = [h for h in root.handlers if isinstance(h, _JsonLinesHandler)]
    if ours:
        handler = ours[0]
        for extra in ours[1:]:
            root.removeHandler(extra)
        if handler.stream is not target:
            handler.setStream(target)
    else:
        handler = _JsonLinesHandler(target)
        root.addHandler(handler)
    handler.setFormatter(JsonFormatter())

    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
