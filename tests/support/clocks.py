"""A clock the test moves by hand, for code that takes its clock as a parameter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

#: Where a :class:`ManualClock` starts unless told.
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class ManualClock:
    """Wall time (call it, or read ``now``) and the matching monotonic seconds
    (``monotonic()``), moved together by :meth:`advance` and by nothing else,
    except ``step``: how far each wall reading moves it (zero, the default:
    frozen between advances; a millisecond: every event its own instant).

    ``now`` may be set outright (e.g. to jump the wall clock backwards).
    """

    def __init__(
        self, start: datetime = T0, *, step: timedelta = timedelta(0), monotonic_start: float = 1000.0
    ) -> None:
        self.now = start
        self.step = step
        self.seconds = monotonic_start

    def __call__(self) -> datetime:
        self.now += self.step
        return self.now

    def monotonic(self) -> float:
        return self.seconds

    def advance(self, delta: timedelta | None = None, /, **parts: float) -> None:
        """Move both clocks by ``delta`` or by ``timedelta(**parts)``
        (``advance(milliseconds=500)``, ``advance(timedelta(days=1))``)."""
        moved = (delta or timedelta(0)) + timedelta(**parts)
        self.now += moved
        self.seconds += moved.total_seconds()
