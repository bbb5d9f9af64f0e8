"""The JSON Lines formatter: one redacted JSON object per log record.

What: :class:`JsonFormatter` writes ``ts`` (ISO-8601 UTC with milliseconds and
a ``Z``), ``level``, ``logger``, ``msg``, ``pid``, ``thread``, every
``extra=`` field of the log call and, when ``exc_info`` is given, ``exc_type``
and ``exc`` (the formatted traceback), all passed through
:mod:`memjobs_worker.logs.redaction`.

Two kinds of record are never trusted with their own message:

* Records from ``mem0`` loggers are reduced to a fixed message.  mem0 logs
  memory text in its messages (e.g. ``"Skipping duplicate memory: <text>"``),
  often via f-strings, so neither the format string nor its arguments can be
  trusted.  Only ``level``/``logger``/``exc_type`` survive, not the traceback.
* A Dramatiq message among a record's arguments is shown as
  ``actor#message_id``: its repr carries the payload.
"""

from __future__ import annotations

import json
import logging
import os
import traceback
from datetime import UTC, datetime
from typing import Any, Final

from memjobs_worker.logs.redaction import redact_text, scrub

#: The message every mem0 record gets instead of its own (which may hold memory text).
MEM0_SUPPRESSED_MSG: Final = "mem0 log record suppressed (may contain memory text)"

# Attributes every LogRecord has; anything else came from ``extra=``.
_RESERVED_ATTRS: Final = frozenset(logging.LogRecord("", logging.INFO, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


# Fields written by the formatter itself; extras with these names are renamed.
_OWN_FIELDS: Final = frozenset({"ts", "level", "logger", "msg", "pid", "thread", "exc_type", "exc", "stack"})


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
        extras = {k: v for k, v in record.__dict__.items() if k not in _RESERVED_ATTRS and not k.startswith("_")}
        for key, value in scrub(extras, omit_text=True).items():
            out[f"extra_{key}" if key in _OWN_FIELDS else key] = value

        if exc_info and exc_info[0] is not None:
            out["exc_type"] = _exc_type_name(exc_info[0])
            out["exc"] = redact_text("".join(traceback.format_exception(*exc_info)).rstrip("\n"))
        elif record.exc_text:
            out["exc"] = redact_text(record.exc_text)
        if record.stack_info:
            out["stack"] = redact_text(self.formatStack(record.stack_info))
        return out
