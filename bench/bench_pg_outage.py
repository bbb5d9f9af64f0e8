"""PostgreSQL outages of increasing length under steady load, with the default timings.

Starts its own Redis and PostgreSQL (embedded, in a scratch directory) and
``memjobs worker`` processes with the default settings (the hashed embedder,
no model: each source is stored verbatim), and a producer remembering
``--rate`` sources a second across ``--owners`` owners throughout. For each
outage length of ``--outages`` (seconds) it kills the postmaster (kill -9),
waits that long while the producer keeps sending, starts PostgreSQL again on
its port, and measures how long until every source sent so far is final.
At the end: sources learned, memories per source (must be one), dead letters
(must be none)::

    .venv/bin/python bench/bench_pg_outage.py [--outages 10,60,180] [--rate 20]

Prints one line per outage and a summary; the figures are in docs/operations.md.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402
import redis  # noqa: E402

from memjobs_client import MemjobsClient, keys  # noqa: E402
from memjobs_client.contracts import QUEUES  # noqa: E402
from memjobs_client.errors import MemjobsError  # noqa: E402
from tests.support.bench_env import Scratch  # noqa: E402


class Producer(threading.Thread):
    """Remembers ``rate`` sources a second across ``owners`` owners until stopped;
    ``text`` formats the i-th source's text (each text new)."""

    def __init__(self, url: str, owners: int, rate: float, text: str = "outage bench fact {i}") -> None:
        super().__init__(daemon=True)
        self.text = text
        self.client = MemjobsClient(url, timeout_s=5)
        self.owners, self.period = owners, 1.0 / rate
        self.sent: set[str] = set()
        self.lock = threading.Lock()
        self.failures = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stopping.wait(self.period):
            try:
                sid = self.client.remember(f"owner-{i % self.owners}", self.text.format(i=i))
                with self.lock:
                    self.sent.add(sid)
            except MemjobsError:
                self.failures += 1
            i += 1

    def snapshot(self) -> set[str]:
        with self.lock:
            return set(self.sent)


def ledger(url: str) -> dict[str, str] | None:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return {str(s): str(st) for s, st in conn.execute("SELECT source_id, state FROM sources")}
    except psycopg.Error:
        return None


def all_final(url: str, sent: set[str]) -> bool:
    found = ledger(url)
    return found is not None and all(found.get(s, "pending") != "pending" for s in sent)


def final_after(url: str, sent: set[str], since: float, what: str) -> float:
    """Seconds from ``since`` (monotonic) until every source of ``sent`` is
    final; the run ends, saying ``what`` it waited after, at 600 s."""
    while not all_final(url, sent):
        if time.monotonic() - since > 600:
            raise SystemExit(f"not final 600 s after {what}")
        time.sleep(0.2)
    return time.monotonic() - since


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--outages", default="10,60,180")
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--owners", type=int, default=50)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args()
    outages = [float(x) for x in args.outages.split(",")]
    with Scratch("pgoutage") as scratch:
        base = scratch.dir
        redis_url, pg = scratch.redis().url, scratch.postgres()
        pg_url = pg.url
        scratch.memjobs(scratch.env(redis_url, pg_url), "worker", "--processes", str(args.processes))
        producer = Producer(redis_url, args.owners, args.rate)
        producer.start()
        deadline = time.monotonic() + 120
        time.sleep(2)
        first = producer.snapshot()
        while not all_final(pg_url, first):
            if time.monotonic() > deadline:
                found = ledger(pg_url) or {}
                late = [(sid, found.get(sid)) for sid in first if found.get(sid, "pending") == "pending"]
                raise SystemExit(f"workers never caught up ({late[:3]} of {len(late)}); see {base / 'workers.log'}")
            time.sleep(0.5)
        print(
            f"steady: {args.rate:g} sources/s over {args.owners} owners, default timings "
            f"(outage budget 30 min, outage backoff cap 5 s, max_retries 10)"
        )
        for outage_s in outages:
            time.sleep(10)  # steady state between outages
            before = len(producer.snapshot())
            pg.kill()
            time.sleep(outage_s)
            pg.restart()
            back = time.monotonic()
            snapshot = producer.snapshot()
            final_s = final_after(pg_url, snapshot, back, f"a {outage_s:g} s outage")
            print(
                f"outage {outage_s:>5g} s: {len(snapshot) - before:>5} sources sent during it; every "
                f"source final {final_s:5.1f} s after PostgreSQL answered again"
            )
        producer.stopping.set()
        producer.join()
        deadline = time.monotonic() + 120
        while not all_final(pg_url, producer.sent) and time.monotonic() < deadline:
            time.sleep(0.5)
        found = ledger(pg_url) or {}
        states: dict[str, int] = {}
        for sid in producer.sent:
            states[found.get(sid, "missing")] = states.get(found.get(sid, "missing"), 0) + 1
        with psycopg.connect(pg_url) as conn:
            tables = [
                r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'mem0_memories_%'")
            ]
            dupes = sum(
                int(r[0])
                for t in tables
                for r in conn.execute(f"SELECT count(*) - count(DISTINCT payload->>'source_id') FROM {t}")
            )  # noqa: S608
            memories = sum(
                int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # type: ignore[index,misc]  # noqa: S608
                for t in tables
            )
        client = redis.Redis.from_url(redis_url)
        dead = sum(int(client.zcard(keys.dead_letters(q))) for q in QUEUES)
        print(
            f"sent {len(producer.sent)} (producer failures {producer.failures}); states {states}; "
            f"memories {memories}, duplicates {dupes}; dead letters {dead}"
        )


if __name__ == "__main__":
    main()
