"""Per-minute job counts in Redis, so ``memjobs status`` shows recent
throughput and failures without Prometheus.

Workers count in memory and flush every couple of seconds in one pipelined
round trip (``HINCRBY memjobs:stats:<minute> <actor>:<outcome> n``), so the
hot path pays no Redis call. Buckets expire after two hours. The same flush
adds the console's hour and day totals (:mod:`~.timeline`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import redis

from memjobs_client import keys
from memjobs_client.redis_seam import as_str, redis_best_effort
from memjobs_worker.observability import timeline

log = logging.getLogger(__name__)
_BUCKET_TTL_S = 2 * 3600


class JobStats:
    """Counts (actor, outcome) per minute; flushes to Redis in the background."""

    def __init__(self, client: redis.Redis, flush_interval_s: float = 2.0) -> None:
        self.client = client
        self.flush_interval_s = flush_interval_s
        self._counts: Counter[tuple[int, str]] = Counter()
        self._timeline: Counter[tuple[str, int, str]] = Counter()  # (key, ttl_s, field)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def count(self, actor: str, outcome: str, duration_s: float | None = None) -> None:
        """Count a job that ended (``duration_s``: how long it ran, when it ran)."""
        now = time.time()
        added = timeline.fields(outcome, duration_s)
        with self._lock:
            self._counts[(int(now // 60), f"{actor}:{outcome}")] += 1
            for window in timeline.WINDOWS:
                key = keys.timeline(window.resolution_s, int(now // window.resolution_s))
                for field, n in added.items():
                    self._timeline[(key, window.ttl_s, field)] += n

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="job-stats", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            counts, self._counts = self._counts, Counter()
            totals, self._timeline = self._timeline, Counter()
        if not counts and not totals:
            return
        with redis_best_effort() as attempt:
            pipe = self.client.pipeline(transaction=False)
            for (minute, field), n in counts.items():
                pipe.hincrby(keys.job_stats(minute), field, n)
                pipe.expire(keys.job_stats(minute), _BUCKET_TTL_S)
            for (key, ttl_s, field), n in totals.items():
                pipe.hincrby(key, field, n)
                pipe.expire(key, ttl_s)
            pipe.execute()
        if attempt.failed:
            log.warning("could not flush job stats; keeping them for the next flush")
            with self._lock:
                self._counts.update(counts)
                self._timeline.update(totals)


def recent(client: redis.Redis, minutes: int, now: float | None = None) -> dict[str, dict[str, int]]:
    """{actor: {outcome: count}} over the last ``minutes`` minutes (this one included)."""
    current = int((now if now is not None else time.time()) // 60)
    pipe = client.pipeline(transaction=False)
    for minute in range(current - minutes + 1, current + 1):
        pipe.hgetall(keys.job_stats(minute))
    totals: dict[str, dict[str, int]] = {}
    for bucket in pipe.execute():
        for raw_field, raw_n in bucket.items():
            field = as_str(raw_field)
            actor, _, outcome = field.partition(":")
            per_actor = totals.setdefault(actor, {})
            per_actor[outcome] = per_actor.get(outcome, 0) + int(raw_n)
    return totals
