"""Benchmark: scaling with worker processes, the cost of fsync, recovery after a host dies.

Prints, from one run on this machine (its own redis-server and PostgreSQL in a
temporary directory, the local model stand-in with a fixed latency):
  1. producer ``remember`` calls per second against Redis with
     ``appendfsync always`` (the default) and ``everysec``: the cost of the
     guarantee that an acknowledged job survives kill -9 of Redis;
  2. sources learned per second with 1, 2 and 4 worker processes (the scaling
     curve), each run on a fresh database;
  3. seconds from kill -9 of a worker host holding a lease mid-extraction to
     the last of its sources learned, with the default timings.

    python bench/bench_hosts.py [--sources 400] [--latency-ms 50] [--kills 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("MEM0_TELEMETRY", "False")

import redis  # noqa: E402
from pydantic import SecretStr  # noqa: E402

from bench.bench_pipeline import fresh_database  # noqa: E402
from memjobs_client import MemjobsClient  # noqa: E402
from memjobs_client.contracts import owner_key  # noqa: E402
from memjobs_worker.db import create_db_engine  # noqa: E402
from memjobs_worker.embedded import EmbeddedPostgres, EmbeddedRedis  # noqa: E402
from memjobs_worker.memory.store.sql import SqlStateStore  # noqa: E402
from memjobs_worker.ops import status as ops  # noqa: E402
from memjobs_worker.settings import DatabaseSettings, MetricsSettings, ModelSettings, RedisSettings, Settings  # noqa: E402
from tests.support.bench_env import Scratch, seconds_to_run  # noqa: E402
from tests.support.harness import Harness, kill_group, spawn_workers  # noqa: E402
from tests.support.openai_server import FakeOpenAI, echo_facts_handler  # noqa: E402


def producer_rate(url: str, calls: int, threads: int = 4) -> float:
    client = MemjobsClient(url)
    per = calls // threads

    def run(t: int) -> None:
        for i in range(per):
            client.remember(f"rate-{t}@example.com", f"throughput probe {t}-{i}")

    elapsed = seconds_to_run([threading.Thread(target=run, args=(t,)) for t in range(threads)])
    client.close()
    return per * threads / elapsed


def fsync_cost(workdir: Path, calls: int) -> dict[str, float]:
    rates = {}
    for mode in ("always", "everysec"):
        server = EmbeddedRedis(workdir / f"redis-{mode}", appendfsync=mode)
        server.start()
        try:
            rates[mode] = producer_rate(server.url, calls)
        finally:
            server.stop()
    return rates


def settings_for(
    redis_url: str, database_url: str, data_dir: Path, model: FakeOpenAI, model_timeout_ms: int = 30_000
) -> Settings:
    return Settings(
        data_dir=data_dir,
        redis=RedisSettings(url=redis_url),
        database=DatabaseSettings(url=database_url),
        model=ModelSettings(
            base_url=model.base_url, api_key=SecretStr("bench-key"), name="fake-flash", timeout_ms=model_timeout_ms
        ),
        metrics=MetricsSettings(port=0),
    )


def scaling(
    redis_url: str, pg: EmbeddedPostgres, workdir: Path, model: FakeOpenAI, sources: int, processes: int
) -> tuple[float, float]:
    redis.Redis.from_url(redis_url).flushall()
    database_url = fresh_database(pg)
    settings = settings_for(redis_url, database_url, workdir / f"scale-{processes}", model)
    store = SqlStateStore(create_db_engine(database_url))
    proc = spawn_workers(settings, workdir / f"scale-{processes}.log", processes=processes, threads=2)
    probe = redis.Redis.from_url(redis_url)
    try:
        while ops.live_workers(probe) < processes:  # every process booted (mem0 loaded)
            time.sleep(0.05)
        client = MemjobsClient(redis_url)
        owners = [f"scale-{i}@example.com" for i in range(max(1, sources // 10))]
        started = time.perf_counter()
        for i in range(sources):
            client.remember(owners[i % len(owners)], f"scaling fact {i} with {processes} processes")
        remember_rate = sources / (time.perf_counter() - started)
        client.close()
        while store.counts_by_state()["learned"] < sources:
            time.sleep(0.05)
        learned_rate = sources / (time.perf_counter() - started)
    finally:
        kill_group(proc)
        store.close()
    return remember_rate, learned_rate


def recovery(redis_url: str, pg: EmbeddedPostgres, workdir: Path, model: FakeOpenAI, run: int) -> float:
    redis.Redis.from_url(redis_url).flushall()
    settings = settings_for(redis_url, fresh_database(pg), workdir / f"recovery-{run}", model, model_timeout_ms=300_000)
    h = Harness(settings)
    owners = [f"recover-{i}@example.com" for i in range(4)]
    for i in range(40):
        h.client.remember(owners[i % 4], f"recovery fact {i}")
    model.hang_next("chat")
    calls = len(model.requests_for("chat"))
    doomed = spawn_workers(settings, workdir / f"doomed-{run}.log", threads=2)
    survivor = None
    try:
        model.wait_for_request("chat", calls + 1, timeout_s=120)
        survivor = spawn_workers(settings, workdir / f"survivor-{run}.log", threads=2)
        while len(h.store.list_sources(owner_key(owners[0]))) == 0 or ops.live_workers(h.runtime.redis) < 2:
            time.sleep(0.05)
        stop = threading.Event()

        def sweeper() -> None:
            while not stop.wait(settings.lifecycle.sweep_interval_ms / 1000):
                try:
                    h.runtime.sweeper.once()
                except Exception:  # noqa: BLE001, S110 - keep sweeping, as the service does
                    pass

        killed_at = time.perf_counter()
        kill_group(doomed)
        thread = threading.Thread(target=sweeper, daemon=True)
        thread.start()
        while h.store.counts_by_state()["learned"] < 40:
            time.sleep(0.05)
        took = time.perf_counter() - killed_at
        stop.set()
        thread.join()
        return took
    finally:
        model.release()
        kill_group(doomed)
        if survivor is not None:
            kill_group(survivor)
        h.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sources", type=int, default=400)
    parser.add_argument("--latency-ms", type=int, default=50)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=2)
    args = parser.parse_args()
    with Scratch("hosts") as scratch:
        workdir = scratch.dir
        rates = fsync_cost(workdir, args.calls)
        print(
            f"producer remember calls/s (4 threads, {args.calls} calls): "
            f"appendfsync always {rates['always']:.0f}, everysec {rates['everysec']:.0f} "
            f"(always/everysec = {rates['always'] / rates['everysec']:.2f})"
        )
        pg, server, model = scratch.postgres(), scratch.redis(), scratch.model(embedding_dims=64)

        def slow_echo(request: dict[str, Any]) -> str:
            time.sleep(args.latency_ms / 1000)
            return echo_facts_handler(request)

        model.set_chat_handler(slow_echo)
        for processes in (1, 2, 4):
            remember_rate, learned_rate = scaling(server.url, pg, workdir, model, args.sources, processes)
            print(
                f"{processes} worker process(es) x 2 threads: remember {remember_rate:.0f}/s, "
                f"learned {learned_rate:.1f} sources/s ({args.sources} sources, "
                f"model latency {args.latency_ms} ms)"
            )
        for run in range(args.kills):
            print(
                f"kill -9 of a host mid-extraction, default timings: every source learned "
                f"{recovery(server.url, pg, workdir, model, run):.1f} s after the kill"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
