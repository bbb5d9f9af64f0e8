"""How much Redis memory memjobs needs: bytes per queued job and per owner's keys.

Measured on an embedded Redis of its own (``used_memory`` before and after, no
worker running): N remembers queued through the producer client at a few text
sizes, N session ends (their three jobs and the session-ended marker), and for
N owners the keys an owner leaves behind: the learning lease's fencing counter
(kept) and the extraction debounce flag (expires after the lease); the
session-ended marker (7 days) is measured among the session ends' bytes. Redis's first job allocates some 200 KB once
(its script and tables): a warm-up job comes before every measure.

    python bench/bench_redis_sizing.py [--n 5000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import redis  # noqa: E402

from memjobs_client import keys  # noqa: E402
from memjobs_client.client import MemjobsClient  # noqa: E402
from memjobs_client.contracts import owner_key  # noqa: E402
from memjobs_worker.embedded import EmbeddedRedis  # noqa: E402


def used(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


def per_item(r: redis.Redis, n: int, one: Callable[[int], None]) -> float:
    """Bytes of ``used_memory`` per call of ``one``, over ``n`` calls on an emptied Redis."""
    r.flushall()
    one(-1)  # warm: the first write allocates tables and scripts once
    before = used(r)
    for i in range(n):
        one(i)
    return (used(r) - before) / n


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--n", type=int, default=5000)
    args = parser.parse_args()
    server = EmbeddedRedis(Path(tempfile.mkdtemp(prefix="memjobs-sizing-")) / "redis")
    url = server.start()
    try:
        r = redis.Redis.from_url(url)
        client = MemjobsClient(url, consolidation_enabled=True, digest_enabled=True)
        info = r.info("server")
        print(f"Redis {info['redis_version']}, {args.n} items per measure, bytes of used_memory each:")
        for size in (100, 1000, 4000):
            pad = "x" * max(0, size - 20)

            def remember(i: int, pad: str = pad) -> None:
                client.remember(f"owner-{i % 1000}", f"fact {i} {pad}")

            print(f"  queued remember, {size:>5} B of text : {per_item(r, args.n, remember):8.0f}")
        now = datetime.now(UTC).isoformat()
        turns = [
            {"role": "user" if t % 2 == 0 else "assistant", "text": f"turn {t} of a talk about trips", "ts": now}
            for t in range(20)
        ]

        def end_session(i: int) -> None:
            client.end_session(f"owner-{i % 1000}", f"session-{i}", turns)

        total = per_item(r, args.n, end_session)
        markers = list(r.scan_iter(match=keys.session_ended("*", "*"), count=5000))
        pipe = r.pipeline(transaction=False)
        for key in markers:
            pipe.memory_usage(key, samples=0)
        marker = sum(int(v or 0) for v in pipe.execute()) / max(1, len(markers))
        print(f"  queued session end, 20 turns (consolidation, digest, extraction jobs + marker): {total:8.0f}")
        print(f"  per session end, session-ended marker (7 days; MEMORY USAGE): {marker:8.0f}")
        owner_keys = [owner_key(f"owner-{i}") for i in range(args.n + 1)]

        def fence(i: int) -> None:
            r.incr(keys.lock_fence("learn", owner_keys[i]))

        def flag(i: int) -> None:
            r.set(keys.extraction_scheduled(owner_keys[i]), "1", px=60_000)

        print(f"  per owner, learning fence counter (kept)      : {per_item(r, args.n, fence):8.0f}")
        print(f"  per owner, extraction flag (lease-long)       : {per_item(r, args.n, flag):8.0f}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
