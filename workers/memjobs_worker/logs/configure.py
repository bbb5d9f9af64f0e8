"""Install the JSON Lines handler on the root logger: :func:`configure_logging`."""

from __future__ import annotations

import logging
import sys
from typing import IO, Final

from memjobs_worker.logs.formatter import JsonFormatter

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
