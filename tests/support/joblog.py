"""The in-process worker's job records ("job done" / "job failed"), to wait on."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


class JobLog(logging.Handler):
    """Collects the in-process worker's "job done"/"job failed" records; waits on them."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.records: list[logging.LogRecord] = []
        self.cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self.cond:
            self.records.append(record)
            self.cond.notify_all()

    def failures(self, actor: str) -> list[logging.LogRecord]:
        with self.cond:
            return [r for r in self.records if r.getMessage() == "job failed" and getattr(r, "actor", None) == actor]

    def wait(self, predicate: Callable[[list[logging.LogRecord]], bool], timeout_s: float, what: str) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: predicate(self.records), timeout=timeout_s)
        assert ok, f"timed out after {timeout_s:.0f} s waiting for {what}"
