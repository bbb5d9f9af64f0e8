"""The workers' log file: every line JSON, rotated by size.

``memjobs up`` reads the worker processes' stdout and stderr through a pipe
and writes ``<data dir>/logs/worker.log`` itself, so that one writer rotates
it (``MEMJOBS_LOG_MAX_BYTES``, ``MEMJOBS_LOG_BACKUPS``) and so that whatever
reaches the pipe without going through the JSON formatter — a library's
``print``, Python's own report of an uncaught exception, a plain-text
Dramatiq record — is wrapped into a JSON record (redacted like any other)
instead of being copied as is. A traceback becomes one record with the
traceback in its ``exc`` field. ``up``'s own records (the HTTP API's server,
the append-only rewrites) reach the same file through :meth:`LogPump.stream`.
"""

from __future__ import annotations

import io
import json
import logging
import re
import threading
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import IO, Any, cast

from memjobs_worker.logs.formatter import JsonFormatter

# Dramatiq's LOGFORMAT: "[%(asctime)s] [PID %(process)d] [%(threadName)s] [%(name)s] [%(levelname)s] %(message)s"
_PLAIN_RECORD = re.compile(
    r"^\[[^\]]+\] \[PID (?P<pid>\d+)\] \[(?P<thread>[^\]]*)\] \[(?P<logger>[^\]]+)\] "
    r"\[(?P<level>[A-Z]+)\] (?P<msg>.*)$"
)
_TRACEBACK_START = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


class _AsIs(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return record.getMessage()


class LogPump:
    """Copy a pipe into a rotating JSON Lines file, line by line, in a thread.

    Parameters:
        path: the log file (created owner-only by the caller's umask).
        max_bytes: rotate when the file would grow past this (0: never).
        backups: rotated files kept (``worker.log.1`` …).
    """

    def __init__(self, path: Path, *, max_bytes: int, backups: int) -> None:
        self.path = path
        self._handler = RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self._handler.setFormatter(_AsIs())
        self._json = JsonFormatter()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def pump(self, stream: IO[bytes]) -> None:
        """Start copying ``stream`` until its end (the workers exited)."""
        thread = threading.Thread(target=self._run, args=(stream,), name="log-pump", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stream(self) -> IO[str]:
        """A text stream whose lines (JSON records) are written to the file:
        where ``memjobs up`` points its own logging."""
        return cast(IO[str], _Lines(self))

    def log(self, level: int, msg: str, **extra: Any) -> None:
        """A record of ``memjobs up`` itself, written to the same file."""
        record = logging.LogRecord("memjobs_worker.supervisor", level, __file__, 0, msg, None, None)
        record.__dict__.update(extra)
        self._write(self._json.format(record))

    def join(self, timeout_s: float = 10.0) -> None:
        for thread in self._threads:
            thread.join(timeout_s)

    def close(self) -> None:
        self.join()
        with self._lock:
            self._closed = True
            self._handler.close()

    def _run(self, stream: IO[bytes]) -> None:
        block: list[str] = []
        try:
            for raw in stream:
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if block:
                    block.append(line)
                    if line and not line[0].isspace() and not line.startswith(_CHAINED) and line != _TRACEBACK_START:
                        self._write(self._traceback(block))
                        block = []
                    continue
                if line == _TRACEBACK_START:
                    block = [line]
                    continue
                if line.strip():
                    self._write(self._convert(line))
        except (OSError, ValueError):
            pass  # the pipe closed under us: the workers are gone
        finally:
            if block:
                self._write(self._traceback(block))
            stream.close()

    def _convert(self, line: str) -> str:
        if line.startswith("{"):
            try:
                if isinstance(json.loads(line), dict):
                    return line
            except ValueError:
                pass
        plain = _PLAIN_RECORD.match(line)
        if plain is not None:
            level = logging.getLevelName(plain["level"])
            record = logging.LogRecord(
                plain["logger"], level if isinstance(level, int) else logging.INFO, "", 0, plain["msg"], None, None
            )
            record.process = int(plain["pid"])
            record.threadName = plain["thread"]
            return self._json.format(record)
        return self._json.format(logging.LogRecord("stderr", logging.INFO, "", 0, line, None, None))

    def _traceback(self, block: list[str]) -> str:
        record = logging.LogRecord(
            "stderr", logging.ERROR, "", 0, block[-1] if len(block) > 1 else "traceback", None, None
        )
        record.exc_text = "\n".join(block)
        return self._json.format(record)

    def _write(self, line: str) -> None:
        record = logging.LogRecord("", logging.INFO, "", 0, line, None, None)
        with self._lock:
            if not self._closed:  # a record after the stop is dropped, not a reopened file
                self._handler.emit(record)


class _Lines(io.TextIOBase):
    """Text written to it becomes lines of a :class:`LogPump`'s file."""

    def __init__(self, pump: LogPump) -> None:
        self._pump = pump
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            if line.strip():
                self._pump._write(line)
        return len(text)
