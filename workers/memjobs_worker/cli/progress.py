"""Progress of long work for the person waiting on it: what remains, the rate,
the time left.

On a terminal, one line on stderr rewritten in place; in a pipe, a plain line
every few seconds (``every_s``); with ``--json``, one JSON object per report,
on stderr too. stdout stays the command's result (one document with
``--json``), so ``memjobs drain --json | jq`` still reads one document.
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import IO, Any

#: How often a terminal's line is rewritten (seconds).
TTY_EVERY_S = 0.5
#: The window the rate is measured over (seconds): recent enough to follow a
#: change of pace, long enough not to jump with each poll.
RATE_WINDOW_S = 30.0


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 5 s``, ``2 h 10 min``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


class Progress:
    """Reports of one piece of work whose remaining amount is known.

    Parameters:
        what: what is counted (``jobs``, ``memories``), in the reports.
        doing: what is under way, said first on a line for people (``draining``).
        as_json: report JSON objects.
        every_s: in a pipe, seconds between two reports.
        stream: where reports go (stderr); a terminal gets the line in place.
        clock: monotonic seconds (a test passes its own).
    """

    def __init__(
        self,
        what: str,
        *,
        doing: str = "",
        as_json: bool = False,
        every_s: float = 5.0,
        stream: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.doing = doing
        self.as_json = as_json
        self.stream = stream if stream is not None else sys.stderr
        self.tty = not as_json and self.stream.isatty()
        self.every_s = TTY_EVERY_S if self.tty else every_s
        self.clock = clock
        self.started = clock()
        self._samples: deque[tuple[float, float]] = deque()
        self._shown_at: float | None = None
        self._drawn = False

    def rate(self) -> float | None:
        """Remaining work done per second over the recent window (None: too early to say)."""
        if len(self._samples) < 2:
            return None
        (t0, left0), (t1, left1) = self._samples[0], self._samples[-1]
        return (left0 - left1) / (t1 - t0) if t1 > t0 else None

    def due(self, now: float | None = None) -> bool:
        """Whether the next :meth:`update` would report (what is costly to read, read only then)."""
        now = self.clock() if now is None else now
        if self._shown_at is None:
            return self.tty or now - self.started >= self.every_s
        return now - self._shown_at >= self.every_s

    def update(self, remaining: float, *, total: float | None = None, detail: str = "", force: bool = False) -> None:
        """Record how much remains now; report it when it is time (or ``force``)."""
        now = self.clock()
        self._samples.append((now, remaining))
        while len(self._samples) > 2 and now - self._samples[0][0] > RATE_WINDOW_S:
            self._samples.popleft()
        if not force and not self.due(now):
            return  # a pipe's first line comes once there is something to say about the pace
        self._shown_at = now
        self._write(self.report(remaining, total=total, detail=detail, now=now))

    def report(
        self, remaining: float, *, total: float | None = None, detail: str = "", now: float | None = None
    ) -> dict[str, Any]:
        """The figures of one report."""
        now = self.clock() if now is None else now
        rate = self.rate()
        left_s = remaining / rate if rate is not None and rate > 0 else None
        return {
            "remaining": remaining,
            "total": total,
            "rate_per_s": None if rate is None else round(rate, 2),
            "eta_s": None if left_s is None else round(left_s, 1),
            "elapsed_s": round(now - self.started, 1),
            "detail": detail,
        }

    def line(self, figures: dict[str, Any]) -> str:
        """A report for people: ``1,200 jobs left of 4,000, 35.2/s, about 34 s left (detail)``."""
        done = f"{figures['remaining']:,.0f} {self.what} left"
        if figures["total"] is not None:
            done += f" of {figures['total']:,.0f}"
        rate = figures["rate_per_s"]
        pace = (
            "measuring the rate"
            if rate is None
            else (
                f"{rate:,.1f}/s"
                if rate > 0
                else f"no progress in the last {duration(min(figures['elapsed_s'], RATE_WINDOW_S))}"
            )
        )
        parts = [done, pace]
        if figures["eta_s"] is not None:
            parts.append(f"about {duration(figures['eta_s'])} left")
        text = (f"{self.doing}: " if self.doing else "") + ", ".join(parts)
        return f"{text} ({figures['detail']})" if figures["detail"] else text

    def _write(self, figures: dict[str, Any]) -> None:
        try:
            if self.as_json:
                self.stream.write(json.dumps({"progress": self.what, **figures}, ensure_ascii=False) + "\n")
            elif self.tty:
                self.stream.write("\r\033[K" + self.line(figures)[:200])
                self._drawn = True
            else:
                self.stream.write(self.line(figures) + "\n")
            self.stream.flush()
        except OSError:
            pass  # the terminal is gone: progress is not worth failing the work for

    def clear(self) -> None:
        """Take a terminal's progress line away (before the result is printed)."""
        if self._drawn:
            try:
                self.stream.write("\r\033[K")
                self.stream.flush()
            except OSError:
                pass
            self._drawn = False
