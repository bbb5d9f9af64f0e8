"""Benchmark: memjobs' remember job against a bare Dramatiq no-op, side by side.

Prints, from one run on one machine (ratios are what count; absolute rates
here are noisy):
  1. remember jobs per second vs. a stock Dramatiq no-op actor on the same Redis with the same
     worker settings, run alternately --repeat times, and the median ratio (target >= 0.5);
  2. Redis round trips per job (client-side count of commands sent; a pipeline
     or a Lua script is one round trip), for both;
  3. model calls per source for a burst of 50 sources from one owner (target <= 0.2).

Everything runs here: its own redis-server and PostgreSQL (pgvector) in a
temporary directory, and a local OpenAI-compatible stand-in for the model.

    python bench/bench_pipeline.py [--jobs 2000] [--threads 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("MEM0_TELEMETRY", "False")

import dramatiq  # noqa: E402
import psycopg  # noqa: E402
import redis  # noqa: E402
import redis.connection  # noqa: E402
from dramatiq.brokers.redis import RedisBroker  # noqa: E402

from memjobs_client.contracts import QUEUE_REMEMBER, owner_key  # noqa: E402
from memjobs_worker.db import create_db_engine, migrate  # noqa: E402
from memjobs_worker.embedded import EmbeddedPostgres  # noqa: E402
from memjobs_worker.settings import Settings  # noqa: E402
from tests.support.bench_env import Scratch  # noqa: E402
from tests.support.harness import Harness  # noqa: E402
from tests.support.openai_server import FakeOpenAI, echo_facts_handler  # noqa: E402
from tests.support.settings import build as build_settings  # noqa: E402


class RoundTrips:
    """Counts commands sent to Redis by this process (one per send, so a
    pipeline or an EVALSHA counts once)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        original = redis.connection.AbstractConnection.send_packed_command

        def counted(conn: object, command: object, check_health: bool = True) -> None:
            with self._lock:
                self.count += 1
            original(conn, command, check_health)  # type: ignore[arg-type,no-untyped-call]

        redis.connection.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]


def fresh_database(server: EmbeddedPostgres) -> str:
    name = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = f"postgresql://postgres@127.0.0.1:{server.port}/{name}"
    engine = create_db_engine(url)
    migrate(engine)
    engine.dispose()
    return url


def wait_queue_empty(client: redis.Redis, queue: str, acks_prefix: str) -> None:
    while True:
        pending = client.llen(f"memjobs:{queue}")
        in_flight = sum(client.scard(k) for k in client.scan_iter(match=f"{acks_prefix}*{queue}"))
        if pending == 0 and in_flight == 0:
            return
        time.sleep(0.01)


def run_to_empty(
    settings: Settings, broker: dramatiq.Broker, queue: str, jobs: int, threads: int, trips: RoundTrips
) -> tuple[float, float]:
    """Runs a worker on ``queue`` until the ``jobs`` sent there are done: jobs per
    second, and Redis round trips per job."""
    probe = redis.Redis.from_url(settings.redis.url or "")
    worker = dramatiq.Worker(broker, worker_threads=threads, queues={queue}, worker_timeout=50)
    start_trips = trips.count
    started = time.perf_counter()
    worker.start()
    wait_queue_empty(probe, queue, "memjobs:__acks__.")
    elapsed = time.perf_counter() - started
    used = trips.count - start_trips
    worker.stop()
    return jobs / elapsed, used / jobs


def run_noop(settings: Settings, jobs: int, threads: int, trips: RoundTrips) -> tuple[float, float]:
    """Stock Dramatiq: its RedisBroker with its default middleware, in memjobs'
    namespace on the same Redis (so the same waits below apply)."""
    broker = RedisBroker(url=settings.redis.url or "", namespace="memjobs")  # type: ignore[no-untyped-call]
    noop_queue = "bench_noop"

    @dramatiq.actor(broker=broker, queue_name=noop_queue, actor_name="bench_noop", max_retries=0)
    def noop(payload: dict[str, object]) -> None:
        return None

    for i in range(jobs):
        noop.send({"i": i})
    rates = run_to_empty(settings, broker, noop_queue, jobs, threads, trips)
    broker.close()
    return rates


def run_remember(settings: Settings, jobs: int, threads: int, trips: RoundTrips) -> tuple[float, float]:
    h = Harness(settings)
    h.runtime.pipeline  # noqa: B018  (build mem0 and the store before the clock starts)
    owners = [f"owner-{i}" for i in range(100)]
    for i in range(jobs):
        h.client.remember(owners[i % len(owners)], f"bench source number {i}: I like item {i}")
    rates = run_to_empty(settings, h.broker, QUEUE_REMEMBER, jobs, threads, trips)
    h.close()
    return rates


def run_burst(settings: Settings, fake: FakeOpenAI, sources: int) -> tuple[int, float]:
    fake.set_chat_handler(echo_facts_handler)
    h = Harness(settings)
    owner = "burst-owner"
    for i in range(sources):
        h.client.remember(owner, f"burst fact {i}: my favourite number is {i * 7}")
    h.start_worker(threads=4)
    h.drain(timeout_s=300)
    learned = sum(1 for r in h.store.list_sources(owner_key(owner)) if r.state == "learned")
    calls = len(fake.requests_for("chat"))
    h.close()
    assert learned == sources, f"only {learned}/{sources} learned"
    return calls, calls / sources


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--burst", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs of each (median ratio)")
    args = parser.parse_args()

    with Scratch("pipeline") as scratch:
        workdir = scratch.dir
        redis_url, pg_server = scratch.redis().url, scratch.postgres()
        fake = scratch.model(embedding_dims=64)
        trips = RoundTrips()
        common: dict[str, Any] = dict(
            redis_url=redis_url, data_dir=workdir / "data", max_retries=3, extract_delay_ms=500
        )
        print(f"memjobs benchmark: {args.jobs} jobs, {args.threads} worker threads, {os.cpu_count()} CPUs", flush=True)

        def on_fresh_stores(
            run: Callable[[Settings, int, int, RoundTrips], tuple[float, float]],
        ) -> tuple[float, float]:
            """One run on a database of its own, Redis emptied after it."""
            rates = run(
                build_settings(**common, database_url=fresh_database(pg_server)), args.jobs, args.threads, trips
            )
            redis.Redis.from_url(redis_url).flushall()
            return rates

        # Side by side, alternating: the machine's load drifts, a ratio of two
        # runs taken back to back does not. The median ratio is the figure.
        ratios = []
        for _ in range(args.repeat):
            noop_rate, noop_trips = on_fresh_stores(run_noop)
            remember_rate, remember_trips = on_fresh_stores(run_remember)
            ratios.append(remember_rate / noop_rate)
            print(
                f"stock Dramatiq no-op {noop_rate:8.0f} jobs/s   {noop_trips:5.2f} Redis round trips/job; "
                f"remember_source {remember_rate:8.0f} jobs/s   {remember_trips:5.2f}; "
                f"ratio {ratios[-1]:.2f}",
                flush=True,
            )
        calls, per_source = run_burst(
            build_settings(
                **common,
                database_url=fresh_database(pg_server),
                memory_base_url=fake.base_url,
                memory_api_key="bench",
                memory_model="bench-flash",
            ),
            fake,
            args.burst,
        )

        print(
            f"ratio remember/no-op, median of {args.repeat}: {statistics.median(ratios):.2f} "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f}; target >= 0.5)"
        )
        print(
            f"burst of {args.burst} sources, one owner: {calls} model calls, "
            f"{per_source:.2f} calls/source (target <= 0.2)"
        )
        return 0


if __name__ == "__main__":
    sys.exit(main())
