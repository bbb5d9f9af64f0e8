"""Job throughput, failures and latency over the last hour and day, in Redis
time buckets, for the console's graphs.

Workers count in memory (:class:`~.jobstats.JobStats`, the same counter and
flush thread as the per-minute outcomes) and add, per bucket, ``jobs`` (every
job that ended, skipped ones included), ``failed`` (retried, dead-lettered or
refused as invalid) and ``ms`` (their summed run time, milliseconds) to the
hash :func:`memjobs_client.keys.timeline`. Two resolutions: minutes for the
hour (:data:`HOUR`), ten minutes for the day (:data:`DAY`); each bucket
expires a little after its window. No actor, owner or text in them: totals.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from memjobs_client import keys
from memjobs_client.redis_seam import as_str

#: Outcomes counted as failures.
FAILED_OUTCOMES = frozenset({"retried", "dead_lettered", "invalid_payload", "memory_off"})


@dataclass(frozen=True)
class Window:
    """A graph's window: ``buckets`` buckets of ``resolution_s`` seconds."""

    name: str
    resolution_s: int
    buckets: int

    @property
    def ttl_s(self) -> int:
        return self.resolution_s * self.buckets + 600


HOUR = Window("hour", 60, 60)
DAY = Window("day", 600, 144)
WINDOWS = (HOUR, DAY)


@dataclass(frozen=True)
class Bucket:
    start: float  # epoch seconds
    jobs: int
    failed: int
    ms: int

    @property
    def mean_ms(self) -> float | None:
        return self.ms / self.jobs if self.jobs else None


def fields(outcome: str, duration_s: float | None) -> dict[str, int]:
    """What one ended job adds to its buckets."""
    out = {"jobs": 1, "failed": int(outcome in FAILED_OUTCOMES)}
    if duration_s is not None:
        out["ms"] = int(duration_s * 1000)
    return out


def read(client: redis.Redis, window: Window, now: float | None = None) -> list[Bucket]:
    """The window's buckets, oldest first (the current, partial one last).

    Raises:
        redis.RedisError: Redis did not answer.
    """
    current = int((time.time() if now is None else now) // window.resolution_s)
    first = current - window.buckets + 1
    with client.pipeline(transaction=False) as pipe:
        for bucket in range(first, current + 1):
            pipe.hgetall(keys.timeline(window.resolution_s, bucket))
        answers = pipe.execute()
    out = []
    for i, raw in enumerate(answers):
        values = {as_str(k): int(v) for k, v in raw.items()}
        out.append(
            Bucket(
                (first + i) * window.resolution_s, values.get("jobs", 0), values.get("failed", 0), values.get("ms", 0)
            )
        )
    return out
