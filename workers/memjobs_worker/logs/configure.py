"""Install the JSON Lines handler on the root logger: :func:`configure_logging`.

Every record of the process goes through it — memjobs', Dramatiq's and every
library's — and so do the reports that would otherwise bypass logging:
uncaught exceptions (main thread and other threads, the traceback in the
record's ``exc`` field) and Python warnings. Chatty libraries (httpx logs one
line per HTTP request) are capped at WARNING. Uvicorn's ``color_message``
(its message again, with terminal colour codes) is dropped from every record.
"""

from __future__ import annotations

import logging
import sys
import threading
from types import TracebackType
from typing import IO, Final

from memjobs_worker.logs.formatter import JsonFormatter

#: Third-party loggers capped at WARNING by :func:`configure_logging`.
NOISY_LOGGERS: Final = (
    "mem0",
    "httpx",
    "httpx2",  # the openai client's HTTP library in some releases (one INFO line per request)
    "httpcore",
    "httpcore2",
    "openai",
    "urllib3",
    "posthog",
    "pgserver",
    "alembic",
)


class _JsonLinesHandler(logging.StreamHandler[IO[str]]):
    """Marker subclass so :func:`configure_logging` can find its own handler.

    Given no stream, it writes to whatever ``sys.stderr`` is when a record is
    emitted: a Dramatiq worker process replaces ``sys.stderr`` by the pipe to
    its main process, which serialises the lines of every process.
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._fixed: IO[str] | None = stream
        super().__init__(stream if stream is not None else sys.stderr)

    @property
    def stream(self) -> IO[str]:
        return self._fixed if self._fixed is not None else sys.stderr

    @stream.setter
    def stream(self, value: IO[str] | None) -> None:
        self._fixed = None if value is sys.stderr else value


class _NoColour(logging.Filter):
    """Drop uvicorn's ``color_message`` extra: ANSI escapes have no place in JSON."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.__dict__.pop("color_message", None)
        return True


def _parse_level(level: str) -> int:
    value = logging.getLevelName(str(level).strip().upper())
    if isinstance(value, int):
        return value
    raise ValueError(f"unknown log level: {level!r}")


def _log_uncaught(
    exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None, thread: str | None = None
) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    logging.getLogger("memjobs_worker.uncaught").critical(
        "uncaught exception", exc_info=(exc_type, exc, tb), extra={"in_thread": thread} if thread else None
    )


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None:
        return
    _log_uncaught(
        args.exc_type, args.exc_value, args.exc_traceback, args.thread.name if args.thread is not None else None
    )


def configure_logging(*, level: str = "INFO", stream: IO[str] | None = None, adopt: bool = False) -> None:
    """Send all logging to ``stream`` (default: the current ``sys.stderr``) as JSON Lines.

    Idempotent: a second call reuses the handler installed by the first one
    (updating its stream and the root level) instead of adding another.
    Other handlers already on the root logger are left alone, unless ``adopt``:
    then, if the root logger has handlers (a Dramatiq worker process logs
    through a pipe to its parent), they are given the JSON formatter instead of
    a second handler being added, so every record is written once, as JSON.
    Either way uncaught exceptions and warnings are logged, not printed.
    """
    root = logging.getLogger()
    root.setLevel(_parse_level(level))
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread
    if adopt and root.handlers:
        for existing in root.handlers:
            existing.setFormatter(JsonFormatter())
            if not any(isinstance(f, _NoColour) for f in existing.filters):
                existing.addFilter(_NoColour())
        return

    ours = [h for h in root.handlers if isinstance(h, _JsonLinesHandler)]
    if ours:
        handler = ours[0]
        for extra in ours[1:]:
            root.removeHandler(extra)
        handler._fixed = stream
    else:
        handler = _JsonLinesHandler(stream)
        handler.addFilter(_NoColour())
        root.addHandler(handler)
    handler.setFormatter(JsonFormatter())
