"""Benchmark: the HTTP API against the Python producer, side by side, in one run.

Prints, from one run on one machine:
  1. POST /v1/remember at 32 concurrent clients: requests/s, p50 and p99 latency,
     next to the Python producer (MemjobsClient.remember from 32 threads)
     enqueueing the same sources directly, and the ratio (target >= 0.5, p99 < 50 ms);
  2. POST /v1/recall p50/p99 with 1,000 learned memories for the owner
     (target p99 < 100 ms), one client at a time and 8 at once.

Everything runs here: its own redis-server and PostgreSQL (pgvector) in a
temporary directory; the API is a separate `memjobs api` process (uvicorn, one
event loop); no worker consumes while enqueue rates are measured; the API logs at INFO
(one JSON line per request), as it does by default. The load
client is a minimal asyncio HTTP/1.1 keep-alive client, so that the client's own
cost stays small next to the server's.

    python bench/bench_http.py [--requests 4000] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("MEM0_TELEMETRY", "False")

import httpx  # noqa: E402
import redis  # noqa: E402

from bench.bench_pipeline import fresh_database  # noqa: E402
from memjobs_client.contracts import owner_key  # noqa: E402
from memjobs_worker.embedded import EmbeddedPostgres, EmbeddedRedis  # noqa: E402
from memjobs_worker.runtime import producer_client  # noqa: E402
from memjobs_worker.settings import DatabaseSettings, MemorySettings, RedisSettings, Settings  # noqa: E402
from tests.support.bench_env import seconds_to_run  # noqa: E402
from tests.support.harness import Harness  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summary(name: str, latencies: list[float], seconds: float) -> dict[str, float]:
    out = {
        "requests": len(latencies),
        "rps": len(latencies) / seconds,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }
    print(
        f"  {name:<34} {out['rps']:8.0f} req/s   p50 {out['p50_ms']:6.2f} ms   p99 {out['p99_ms']:6.2f} ms"
        f"   ({len(latencies)} requests)",
        flush=True,
    )
    return out


async def http_load(port: int, path: str, bodies: list[bytes], concurrency: int) -> tuple[list[float], float]:
    """POST each body once over ``concurrency`` keep-alive connections; per-request latencies."""
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    latencies: list[float] = []

    async def connection() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while not queue.empty():
                body = queue.get_nowait()
                head = (
                    f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                ).encode()
                started = time.perf_counter()
                writer.write(head + body)
                status_line = await reader.readline()
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                latencies.append(time.perf_counter() - started)
                if not status_line.startswith((b"HTTP/1.1 2",)):
                    raise RuntimeError(f"{path}: {status_line!r}")
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(concurrency)))
    return latencies, time.perf_counter() - started


def producer_load(
    settings: Settings, redis_url: str, texts: list[str], owner: str, concurrency: int
) -> tuple[list[float], float]:
    """MemjobsClient.remember from ``concurrency`` threads sharing one client (one pool)."""
    client = producer_client(
        settings.redis, settings.memory, settings.sessions, settings.knowledge, redis_url=redis_url
    )
    latencies: list[float] = []
    lock = threading.Lock()
    chunks = [texts[i::concurrency] for i in range(concurrency)]

    def run(chunk: list[str]) -> None:
        mine = []
        for text in chunk:
            started = time.perf_counter()
            client.remember(owner, text)
            mine.append(time.perf_counter() - started)
        with lock:
            latencies.extend(mine)

    elapsed = seconds_to_run([threading.Thread(target=run, args=(c,)) for c in chunks])
    client.close()
    return latencies, elapsed


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_api(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "memjobs_worker.cli.main", "api", "--port", str(port)],
        env=env,
        stdout=out,
        stderr=out,
        cwd=REPO,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit(f"the API did not start:\n{log.read_text()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--recalls", type=int, default=400)
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="memjobs-bench-http-"))
    redis_server = EmbeddedRedis(base / "redis")
    pg = EmbeddedPostgres(base / "pg")
    api: subprocess.Popen[bytes] | None = None
    harness: Harness | None = None
    try:
        redis_url = redis_server.start()
        pg.start()
        database_url = fresh_database(pg)
        settings = Settings(
            data_dir=base / "data",
            redis=RedisSettings(url=redis_url),
            database=DatabaseSettings(url=database_url),
            memory=MemorySettings(extract_delay_ms=20),
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMJOBS_", "QWEN_", "DASHSCOPE"))}
        env.update(
            {
                "MEMJOBS_REDIS_URL": redis_url,
                "MEMJOBS_DATABASE_URL": database_url,
                "MEMJOBS_DATA_DIR": str(base / "data"),
                "MEMJOBS_LOG_LEVEL": "INFO",
                "MEMJOBS_API_MAX_IN_FLIGHT": "256",
                "PYTHONPATH": str(REPO),
            }
        )
        port = free_port()
        api = start_api(env, port, base / "api.log")
        r = redis.Redis.from_url(redis_url)
        owner = "bench-owner"
        texts = [f"fact {i}: the user likes tea number {i} in the morning" for i in range(args.requests)]
        bodies = [json.dumps({"owner_id": owner, "text": t}).encode() for t in texts]

        print(f"remember, {args.concurrency} concurrent clients, {args.requests} sources each way:")
        asyncio.run(http_load(port, "/v1/remember", bodies[:200], args.concurrency))  # warm-up
        producer_load(settings, redis_url, texts[:200], owner, args.concurrency)
        r.flushall()
        direct = summary(
            "Python producer (MemjobsClient)", *producer_load(settings, redis_url, texts, owner, args.concurrency)
        )
        r.flushall()
        cpu_before = cpu_seconds(api.pid)
        http = summary(
            "HTTP POST /v1/remember", *asyncio.run(http_load(port, "/v1/remember", bodies, args.concurrency))
        )
        cpu_per_request = (cpu_seconds(api.pid) - cpu_before) / args.requests
        print(f"  API process CPU per request: {cpu_per_request * 1000:.2f} ms")
        queued = r.llen("memjobs:memjobs_remember")
        assert queued == args.requests, f"{queued} jobs queued, expected {args.requests}"
        print(f"  ratio HTTP / producer: {http['rps'] / direct['rps']:.2f}  (target >= 0.5; HTTP p99 target < 50 ms)")
        r.flushall()

        print(f"recall with {args.memories} learned memories for the owner:")
        harness = Harness(settings)
        client = producer_client(
            settings.redis, settings.memory, settings.sessions, settings.knowledge, redis_url=redis_url
        )
        for i in range(args.memories):
            client.remember(owner, f"memory {i}: the user's favourite tea is oolong grade {i}")
        client.close()
        harness.start_worker(threads=2)
        started = time.perf_counter()
        harness.drain(600)
        learned = len(harness.pipeline.memories(owner_key(owner)))
        print(f"  learned {learned} memories in {time.perf_counter() - started:.1f} s")
        harness.stop_worker()
        queries = [
            json.dumps({"owner_id": owner, "query": f"oolong grade {i}", "limit": 5}).encode()
            for i in range(args.recalls)
        ]
        asyncio.run(http_load(port, "/v1/recall", queries[:20], 1))  # warm-up (mem0 loads)
        summary("POST /v1/recall, 1 client", *asyncio.run(http_load(port, "/v1/recall", queries, 1)))
        summary("POST /v1/recall, 8 clients", *asyncio.run(http_load(port, "/v1/recall", queries, 8)))
        print("  (target p99 < 100 ms)")
        return 0
    finally:
        if harness is not None:
            harness.close()
        if api is not None:
            api.terminate()
            api.wait(30)
        pg.stop()
        redis_server.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
