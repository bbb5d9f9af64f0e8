"""Memory of the embedded default: every process of one ``memjobs up``, idle and busy.

``memjobs up`` is started as a user starts it (the CLI, a fresh data directory
in a temporary directory, the embedded Redis and PostgreSQL, the local e5
embedder), with the local model stand-in as its chat model
(``tests/support/openai_server.py``, mem0-style facts echoed back). Once it is
ready (the API's URL in the state file, a worker's heartbeat in Redis),
nothing is sent for ``--idle`` seconds and memory is read ("never used");
then one source is learned and one recall answered through the HTTP API (mem0
and the model loaded where they are used), nothing is sent for ``--idle``
seconds again, and memory is read again. A reading is the resident memory of
every process of the stack:
``memjobs up`` and its descendants, and the PostgreSQL and Redis servers with
theirs. RSS counts the pages a process maps, shared ones (the model file, the
interpreter, PostgreSQL's shared buffers) in every process that maps them; PSS
shares each page among the processes that map it, so it sums to what the stack
really takes.

Then ``--sources`` sources from ``--owners`` owners are remembered through the
HTTP API, with a recall every ``--recall-every`` sources, and memory is read
every half second until they are all learned: the busy figure is the reading
with the highest RSS in all.

    python bench/bench_footprint.py [--idle 25] [--sources 300] [--owners 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
import redis  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from memjobs_client import keys  # noqa: E402
from memjobs_worker.embedded.stack import read_stack  # noqa: E402
from tests.support.openai_server import FakeOpenAI, echo_facts_handler  # noqa: E402

MEMJOBS = Path(sys.executable).with_name("memjobs")


@dataclass(frozen=True)
class Reading:
    """One process's memory: ``role`` (what it is in the stack), RSS and PSS in bytes."""

    pid: int
    role: str
    rss: int
    pss: int


def role_of(proc: psutil.Process, up_pid: int) -> str:
    """What a process is in the stack, from its command line and parent."""
    try:
        cmd = proc.cmdline()
        name = str(proc.name())
        parent = proc.ppid()
    except psutil.Error:
        return "?"
    line = " ".join(cmd)
    if proc.pid == up_pid:
        return "memjobs up (API, sweeper)"
    if name.startswith("redis"):
        return "redis-server"
    if name.startswith("postgres") or "postgres" in (cmd[0] if cmd else ""):
        title = line.removeprefix("postgres: ").strip()
        if " -D " in f" {line} ":
            return "postgres: postmaster"
        # A backend's title: "user database address state": keep its state only.
        words = title.split()
        return "postgres: backend" if len(words) >= 3 and "(" in title else f"postgres: {title}"
    if "memjobs_worker" in line:
        if "--queues" not in cmd:
            return "workers: runner (no --queues)"
        queues = cmd[cmd.index("--queues") + 1 :]
        pool = (
            "cheap"
            if "memjobs_remember" in queues and "memjobs_extract" not in queues
            else ("model" if "memjobs_remember" not in queues else "all")
        )
        try:
            parent_line = " ".join(psutil.Process(parent).cmdline())
        except psutil.Error:
            parent_line = ""
        if parent_line == line:
            return f"workers: {pool} pool, worker process"
        return f"workers: {pool} pool, main"
    return name


def stack_processes(up_pid: int, data_dir: Path) -> list[psutil.Process]:
    """``memjobs up`` and its descendants, and whatever runs on the data
    directory (PostgreSQL's postmaster, Redis) with its descendants."""
    roots = [psutil.Process(up_pid)]
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if str(data_dir) in line and proc.pid != up_pid:
            roots.append(proc)
    seen: dict[int, psutil.Process] = {}
    for root in roots:
        try:
            for proc in [root, *root.children(recursive=True)]:
                seen[proc.pid] = proc
        except psutil.Error:
            continue
    return sorted(seen.values(), key=lambda p: p.pid)


def read_memory(up_pid: int, data_dir: Path) -> list[Reading]:
    readings = []
    for proc in stack_processes(up_pid, data_dir):
        try:
            full = proc.memory_full_info()
        except psutil.Error:
            continue
        readings.append(Reading(proc.pid, role_of(proc, up_pid), full.rss, full.pss))
    return readings


def mb(n: float) -> str:
    return f"{n / 1e6:6.1f}"


def report(title: str, readings: list[Reading]) -> str:
    rss, pss = sum(r.rss for r in readings), sum(r.pss for r in readings)
    lines = [f"{title}: {mb(rss).strip()} MB RSS, {mb(pss).strip()} MB PSS in {len(readings)} processes"]
    for r in sorted(readings, key=lambda r: -r.rss):
        lines.append(f"  {mb(r.rss)} MB RSS {mb(r.pss)} MB PSS  pid {r.pid:<7} {r.role}")
    return "\n".join(lines)


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(  # noqa: S310 - the bench's own local API
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - as above
        result: dict[str, Any] = json.loads(answer.read())
        return result


def wait_for(what: str, check: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    raise TimeoutError(f"{what} not within {timeout_s:.0f} s")


def learned_count(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM sources WHERE state = 'learned'")).scalar_one())


def heartbeats(client: redis.Redis) -> int:
    return sum(1 for _ in client.scan_iter(f"{keys.HEARTBEAT_PREFIX}*"))


def stack_env(data_dir: Path, model_url: str, extra: list[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMJOBS_")}
    env.update(
        {
            "MEMJOBS_DATA_DIR": str(data_dir),
            "MEMJOBS_API_PORT": "0",
            "MEMJOBS_METRICS_PORT": "0",
            "QWEN_AUDIO_MEMORY_BASE_URL": model_url,
            "QWEN_AUDIO_MEMORY_API_KEY": "bench",
            "QWEN_AUDIO_MEMORY_MODEL": "stand-in",
            "MEM0_TELEMETRY": "False",
        }
    )
    env.update(item.split("=", 1) for item in extra)  # type: ignore[misc]  # NAME=value pairs
    return env


@dataclass
class Up:
    process: subprocess.Popen[bytes]
    data_dir: Path
    api_url: str
    redis_url: str
    database_url: str


@contextmanager
def start_up(data_dir: Path, env: dict[str, str]) -> Iterator[Up]:
    """``memjobs up`` in its own session, until its state file names the API."""
    out = (data_dir.parent / "up.out").open("wb")
    process = subprocess.Popen(
        [str(MEMJOBS), "up"], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )

    def started() -> Any:
        if process.poll() is not None:
            raise RuntimeError(f"memjobs up exited with {process.returncode}: see {out.name}")
        info = read_stack(data_dir)
        return info if info is not None and info.api_url is not None else None

    try:
        info = wait_for("memjobs up's banner", started, 300)
        yield Up(process, data_dir, info.api_url, info.redis_url, info.database_url)
    finally:
        process.terminate()
        try:
            process.wait(180)
        except subprocess.TimeoutExpired:
            process.kill()
        out.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idle", type=float, default=25.0, help="seconds without work before the idle reading")
    parser.add_argument("--sources", type=int, default=300)
    parser.add_argument("--owners", type=int, default=20)
    parser.add_argument("--recall-every", type=int, default=10)
    parser.add_argument("--env", action="append", default=[], help="NAME=value for memjobs up (repeatable)")
    parser.add_argument(
        "--dir",
        type=Path,
        help="run in this (empty) directory and keep it "
        "(up.out, the data directory and its logs); default a temporary one",
    )
    parser.add_argument("--json", type=Path, help="append the readings here, one JSON object a run")
    args = parser.parse_args()
    print(
        f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; "
        f"{os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.1f} GiB",
        flush=True,
    )
    with FakeOpenAI() as model, tempfile.TemporaryDirectory(prefix="memjobs-footprint-") as tmp:
        if args.dir is not None:
            args.dir.mkdir(parents=True, exist_ok=True)
            tmp = str(args.dir)
        model.set_chat_handler(echo_facts_handler)
        data_dir = Path(tmp) / "data"
        started = time.monotonic()
        with start_up(data_dir, stack_env(data_dir, model.base_url, args.env)) as up:
            client = redis.Redis.from_url(up.redis_url)
            # No connection kept between reads: it would be one of the stack's PostgreSQL backends.
            engine = sa.create_engine(
                up.database_url.replace("postgresql://", "postgresql+psycopg://", 1), poolclass=sa.pool.NullPool
            )
            wait_for("a worker heartbeat", lambda: heartbeats(client), 300)
            print(
                f"ready in {time.monotonic() - started:.1f} s; {heartbeats(client)} worker heartbeats; "
                f"idle {args.idle:.0f} s",
                flush=True,
            )
            time.sleep(args.idle)  # the measured condition itself: no work for this long
            fresh = read_memory(up.process.pid, data_dir)
            print(report("idle, never used", fresh), flush=True)
            # A user's first minute: a source learned, a recall answered (mem0 and the model loaded).
            post(f"{up.api_url}/v1/remember", {"owner_id": "warm", "text": "I keep my keys on the hook"})
            wait_for("the first source learned", lambda: learned_count(engine) >= 1, 300)
            post(f"{up.api_url}/v1/recall", {"owner_id": "warm", "query": "keys", "limit": 3})
            time.sleep(args.idle)
            idle = read_memory(up.process.pid, data_dir)
            print(report("idle after one source learned and one recall", idle), flush=True)

            busy = idle
            sent = 0
            begun = time.monotonic()
            while sent < args.sources:
                owner = f"owner-{sent % args.owners}"
                post(
                    f"{up.api_url}/v1/remember",
                    {"owner_id": owner, "text": f"fact {sent}: I keep item {sent} on shelf {sent % 7}"},
                )
                sent += 1
                if sent % args.recall_every == 0:
                    post(f"{up.api_url}/v1/recall", {"owner_id": owner, "query": f"item {sent}", "limit": 5})
                if sent % 25 == 0:
                    now = read_memory(up.process.pid, data_dir)
                    busy = max(busy, now, key=lambda rs: sum(r.rss for r in rs))
            while learned_count(engine) < args.sources + 1:
                now = read_memory(up.process.pid, data_dir)
                busy = max(busy, now, key=lambda rs: sum(r.rss for r in rs))
                time.sleep(0.5)
                if time.monotonic() - begun > 600:
                    raise TimeoutError("the sources were not learned within 600 s")
            took = time.monotonic() - begun
            print(
                report(
                    f"busy (highest reading while {args.sources} sources from {args.owners} owners "
                    f"were learned in {took:.1f} s, a recall every {args.recall_every})",
                    busy,
                ),
                flush=True,
            )
            engine.dispose()
            if args.json:
                with args.json.open("a") as f:
                    f.write(
                        json.dumps(
                            {
                                "env": args.env,
                                "fresh": [r.__dict__ for r in fresh],
                                "idle": [r.__dict__ for r in idle],
                                "busy": [r.__dict__ for r in busy],
                            }
                        )
                        + "\n"
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
