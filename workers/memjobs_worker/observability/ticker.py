"""A worker middleware's background beat: an action on a daemon thread of its own."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Ticker:
    """Calls ``tick`` every ``period_s()`` seconds on a daemon thread named ``name``,
    from :meth:`start` until :meth:`stop`; the period is read before each wait."""

    def __init__(self, name: str, tick: Callable[[], None], period_s: Callable[[], float]) -> None:
        self.name = name
        self.tick = tick
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop, and wait for a tick under way to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.period_s()):
            self.tick()
