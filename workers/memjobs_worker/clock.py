"""The one time source: aware UTC datetimes, injectable where time matters.

Stores and logs take a ``clock`` (a zero-argument callable) so that tests can
move time forward instead of sleeping.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    """Now, in UTC, timezone-aware."""
    return datetime.now(UTC)


def age_ms(now: datetime, then: datetime) -> int:
    """Whole milliseconds from ``then`` to ``now``, never negative."""
    return max(0, int((now - then).total_seconds() * 1000))
