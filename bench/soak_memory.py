"""Soak: memory over a long run under steady load, worker processes restarted on a schedule.

Real worker processes (as ``memjobs up`` runs them), an embedded Redis and
PostgreSQL and the local model stand-in (the bench_load.py set-up, reused).
A producer thread sends ``--rate`` calls/s from ``--owners`` owners: mostly
``remember``, with forgets of earlier sources and session ends (consolidation
on) mixed in. Four worker process groups run: for the model queues and for the
cheap queues, one that lives the whole run and one restarted every
``--restart-every`` seconds (SIGTERM, then a fresh process).

Every ``--interval`` seconds one line of figures is printed and appended to a
JSON-lines file: each worker process's RSS, Redis memory (and that of the
session-end markers, which live 7 days by design), Redis keys by kind and how
many of them carry no TTL, PostgreSQL table sizes and row counts, and queue
depths. At the end the series that must not grow are compared, after warm-up
(the first quarter of the run, at least 2 minutes when the run is longer
than 8): the mean of the last third against the mean of the first third of the
rest, within 10 %. ``--plot`` draws docs/img/soak-memory.svg (and .png when
matplotlib is importable, else ImageMagick's ``convert``) from a JSON-lines file.

    python bench/soak_memory.py [--minutes 30] [--rate 10] [--owners 1000]
    python bench/soak_memory.py --plot /tmp/soak.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("MEM0_TELEMETRY", "False")

import psutil  # noqa: E402
import psycopg  # noqa: E402
import redis  # noqa: E402
from pydantic import SecretStr  # noqa: E402

from bench.bench_load import Bench, settings_env  # noqa: E402
from memjobs_client.errors import MemjobsError  # noqa: E402
from memjobs_worker.ops.status import queue_stats  # noqa: E402
from memjobs_worker.pools import worker_pools  # noqa: E402
from memjobs_worker.runtime import producer_client  # noqa: E402
from memjobs_worker.settings import (  # noqa: E402
    DatabaseSettings,
    MetricsSettings,
    ModelSettings,
    RedisSettings,
    SessionSettings,
    Settings,
)
from tests.support.openai_server import echo_facts_handler  # noqa: E402

#: Redis keys by kind: the prefix after ``memjobs:`` (first match wins).
KINDS = (
    ("fences", "lock:"),  # only keys ending ":fence": see kind_of
    ("flags", "sched:"),
    ("markers", "session-ended:"),
    ("locks", "lock:"),
    ("job stats", "stats:"),
    ("heartbeats", "heartbeat:"),
    ("in flight", "__acks__"),
    ("dramatiq heartbeats", "__heartbeats__"),
    ("queues", "memjobs_"),
    ("knowledge parts", "knowledge:"),
)
#: Kinds whose every key must carry a TTL (they expire on their own). A lease's
#: fencing counter is kept (one per owner and lease: bounded by the owners).
MUST_EXPIRE = ("flags", "markers", "locks", "job stats", "heartbeats")


def kind_of(key: str) -> str:
    rest = key[len("memjobs:") :]
    if rest.startswith("lock:") and rest.endswith(":fence"):
        return "fences"
    return next((k for k, prefix in KINDS[1:] if rest.startswith(prefix)), "other")


class Group:
    """One worker process group (a Dramatiq main process and its children)."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log: Path, restart: bool) -> None:
        self.name, self.command, self.env, self.log, self.restart = name, command, env, log, restart
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def start(self) -> None:
        out = open(self.log, "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            self.command,
            env=self.env,
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=REPO,
        )
        out.close()

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.send_signal(signal.SIGTERM)  # Dramatiq forwards it to its children once
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def rss(self) -> dict[str, int]:
        """RSS in bytes of each process of the group, by ``main``/``worker-<n>``."""
        if self.proc is None:
            return {}
        out: dict[str, int] = {}
        try:
            main = psutil.Process(self.proc.pid)
            out["main"] = main.memory_info().rss
            for i, child in enumerate(sorted(main.children(recursive=True), key=lambda p: p.pid)):
                out[f"worker-{i}"] = child.memory_info().rss
        except psutil.Error:
            pass
        return out


class Load(threading.Thread):
    """Steady calls from many owners: remember, forget, end_session."""

    def __init__(self, settings: Settings, redis_url: str, rate: float, owners: int) -> None:
        super().__init__(daemon=True)
        self.client = producer_client(
            settings.redis, settings.memory, settings.sessions, settings.knowledge, redis_url=redis_url
        )
        self.rate, self.owners = rate, owners
        self.stop_event = threading.Event()
        self.counts: Counter[str] = Counter()
        self.sources: dict[int, list[str]] = {}
        self.rng = random.Random(7)

    def run(self) -> None:
        start, i = time.monotonic(), 0
        while not self.stop_event.is_set():
            pause = start + i / self.rate - time.monotonic()
            if pause > 0:
                self.stop_event.wait(pause)
            try:
                self.one(i)
            except MemjobsError as exc:
                self.counts[f"refused:{exc.reason}"] += 1
            i += 1

    def one(self, i: int) -> None:
        owner = self.rng.randrange(self.owners)
        who = f"soak-owner-{owner}"
        roll = self.rng.random()
        known = self.sources.setdefault(owner, [])
        if roll < 0.08 and known:
            self.client.forget(who, known.pop(self.rng.randrange(len(known))))
            self.counts["forget"] += 1
        elif roll < 0.16:
            now = datetime.now(UTC).isoformat()
            turns = [
                {"role": "user", "text": f"we planned trip {i} to city {i % 40}", "ts": now},
                {"role": "assistant", "text": f"noted: trip {i} to city {i % 40}", "ts": now},
            ]
            self.client.end_session(who, f"session-{i}", turns)
            self.counts["end_session"] += 1
        else:
            known.append(self.client.remember(who, f"fact {i}: I keep item {i} on shelf {i % 13}"))
            del known[:-20]  # forget among the owner's recent sources
            self.counts["remember"] += 1


def redis_figures(client: redis.Redis) -> dict[str, Any]:
    info = client.info("memory")
    kinds: Counter[str] = Counter()
    no_ttl: Counter[str] = Counter()
    markers: list[bytes] = []
    batch: list[tuple[str, bytes]] = []

    def flush() -> None:
        pipe = client.pipeline(transaction=False)
        for _, key in batch:
            pipe.ttl(key)
        for (kind, _), ttl in zip(batch, pipe.execute(), strict=True):
            if ttl == -1:
                no_ttl[kind] += 1
        batch.clear()

    for key in client.scan_iter(match="memjobs:*", count=2000):
        kind = kind_of(key.decode())
        kinds[kind] += 1
        if kind == "markers":
            markers.append(key)
        if kind in MUST_EXPIRE:
            batch.append((kind, key))
            if len(batch) >= 1000:
                flush()
    flush()
    marker_bytes = 0
    for i in range(0, len(markers), 1000):
        pipe = client.pipeline(transaction=False)
        for key in markers[i : i + 1000]:
            pipe.memory_usage(key, samples=0)
        marker_bytes += sum(int(v or 0) for v in pipe.execute())
    used = int(info["used_memory"])
    return {
        "used_memory": used,
        "used_memory_rss": int(info["used_memory_rss"]),
        "marker_bytes": marker_bytes,
        "used_without_markers": used - marker_bytes,
        "keys": dict(kinds),
        "keys_without_ttl": dict(no_ttl),
    }


def postgres_figures(url: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
        ]
        out: dict[str, Any] = {}
        for table in tables:
            rows = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()
            size = conn.execute("SELECT pg_total_relation_size(%s)", (f'"{table}"',)).fetchone()
            out[table] = {"rows": int(rows[0]) if rows else 0, "bytes": int(size[0]) if size else 0}
        db = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return {"tables": out, "database_bytes": int(db[0]) if db else 0}


def sample(elapsed: float, groups: list[Group], client: redis.Redis, db_url: str, load: Load) -> dict[str, Any]:
    queues = queue_stats(client)
    return {
        "t_s": round(elapsed, 1),
        "rss": {g.name: g.rss() for g in groups},
        "restarts": {g.name: g.restarts for g in groups if g.restart},
        "redis": redis_figures(client),
        "postgres": postgres_figures(db_url),
        "queues": {q.removeprefix("memjobs_"): v["ready"] + v["delayed"] + v["in_flight"] for q, v in queues.items()},
        "dead": {q.removeprefix("memjobs_"): v["dead"] for q, v in queues.items() if v["dead"]},
        "calls": dict(load.counts),
    }


def line(s: dict[str, Any]) -> str:
    mib = 1024 * 1024
    rss = " ".join(f"{g}:{'/'.join(f'{v / mib:.0f}' for v in p.values()) or '-'}" for g, p in s["rss"].items())
    r = s["redis"]
    keys = ",".join(f"{k}={v}" for k, v in sorted(r["keys"].items()))
    pg = s["postgres"]
    rows = ",".join(f"{t}={v['rows']}" for t, v in pg["tables"].items() if v["rows"])
    return (
        f"[{s['t_s'] / 60:5.1f} min] RSS MiB {rss} | Redis {r['used_memory'] / mib:.2f} MiB "
        f"(markers {r['marker_bytes'] / mib:.2f}) keys {keys} no-TTL {r['keys_without_ttl'] or 0} | "
        f"PG {pg['database_bytes'] / mib:.1f} MiB rows {rows} | queued {sum(s['queues'].values())} "
        f"dead {s['dead'] or 0} | calls {s['calls']}"
    )


def series(samples: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """The figures that must stay flat, by name: long-lived workers' RSS (MiB),
    Redis memory without the markers (MiB), flags and locks, tombstones and
    queued messages."""
    out: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        t = s["t_s"] / 60
        for group, procs in s["rss"].items():
            if group.endswith("long-lived"):
                for proc, rss in procs.items():
                    if proc != "main":
                        out.setdefault(f"RSS {group} {proc} (MiB)", []).append((t, rss / 2**20))
        r = s["redis"]
        out.setdefault("Redis used_memory without markers (MiB)", []).append((t, r["used_without_markers"] / 2**20))
        out.setdefault("Redis flags + locks (keys)", []).append(
            (t, r["keys"].get("flags", 0) + r["keys"].get("locks", 0))
        )
        tomb = s["postgres"]["tables"].get("tombstones", {}).get("rows", 0)
        out.setdefault("PG tombstones (rows)", []).append((t, tomb))
        out.setdefault("queued messages", []).append((t, sum(s["queues"].values())))
    return out


def flatness(samples: list[dict[str, Any]], warmup_s: float) -> list[tuple[str, float, float, bool]]:
    """(name, early mean, late mean, flat) for each series after warm-up: flat
    when the late mean is within 10 % of the early one (or within 20 for counts
    that stay small: a few keys or messages in flight either way)."""
    after = [s for s in samples if s["t_s"] >= warmup_s]
    out = []
    for name, points in series(after).items():
        values = [v for _, v in points]
        if len(values) < 3:
            continue
        third = max(1, len(values) // 3)
        early, late = statistics.fmean(values[:third]), statistics.fmean(values[-third:])
        small = "MiB" not in name
        flat = late <= early * 1.10 or (small and late - early <= 20)
        out.append((name, early, late, flat))
    return out


def plot(samples: list[dict[str, Any]], svg_path: Path) -> None:
    """An SVG of the flat series and the markers, one panel each, and a PNG
    beside it (matplotlib when importable, else ImageMagick when installed)."""
    panels = series(samples)
    panels["Redis session-end markers (MiB, 7-day TTL)"] = [
        (s["t_s"] / 60, s["redis"]["marker_bytes"] / 2**20) for s in samples
    ]
    panels["Redis used_memory (MiB)"] = [(s["t_s"] / 60, s["redis"]["used_memory"] / 2**20) for s in samples]
    panels["PostgreSQL database (MiB; the ledger grows with sources)"] = [
        (s["t_s"] / 60, s["postgres"]["database_bytes"] / 2**20) for s in samples
    ]
    w, h, cols = 420, 200, 2
    rows = (len(panels) + cols - 1) // cols
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w * cols}" height="{h * rows}" '
        f'font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/>'
    ]
    for n, (name, points) in enumerate(panels.items()):
        x0, y0 = (n % cols) * w + 50, (n // cols) * h + 25
        pw, ph = w - 70, h - 60
        if not points:
            continue
        tmax = max(t for t, _ in points) or 1
        vmax = max(v for _, v in points) * 1.15 or 1
        path = " ".join(f"{x0 + t / tmax * pw:.1f},{y0 + ph - v / vmax * ph:.1f}" for t, v in points)
        parts += [
            f'<text x="{x0}" y="{y0 - 8}" font-weight="bold">{name}</text>',
            f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
            f'<polyline points="{path}" fill="none" stroke="#1565c0" stroke-width="1.5"/>',
            f'<text x="{x0 - 4}" y="{y0 + 4}" text-anchor="end">{vmax:.3g}</text>',
            f'<text x="{x0 - 4}" y="{y0 + ph}" text-anchor="end">0</text>',
            f'<text x="{x0 + pw}" y="{y0 + ph + 14}" text-anchor="end">{tmax:.0f} min</text>',
        ]
    parts.append("</svg>")
    svg_path.write_text("\n".join(parts) + "\n")
    try:
        import matplotlib
    except ImportError:
        convert = shutil.which("convert")
        if convert:
            subprocess.run([convert, str(svg_path), str(svg_path.with_suffix(".png"))], check=False)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, cols, figsize=(11, 2.6 * rows), squeeze=False)
    for ax, (name, points) in zip(axes.flat, panels.items(), strict=False):
        ax.plot([t for t, _ in points], [v for _, v in points], color="#1565c0")
        ax.set_title(name, fontsize=9)
        ax.set_ylim(bottom=0, top=max((v for _, v in points), default=1) * 1.15 or 1)
        ax.set_xlabel("minutes", fontsize=8)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(svg_path.with_suffix(".png"), dpi=80)


def run(args: argparse.Namespace) -> int:
    bench = Bench(argparse.Namespace(model_ms=args.model_ms, keep=args.keep, threads=args.threads, profile=False))
    out_path = Path(args.out)
    out_path.write_text("")
    groups: list[Group] = []
    load: Load | None = None
    delay_s = args.model_ms / 1000
    patch = json.dumps(
        {"patches": [{"doc": "MEMORY.md", "op": "append", "text": "- Plans trips", "evidence": "we planned trip"}]}
    )

    def model(request: dict[str, Any]) -> str:
        """Facts for extraction, one patch for a consolidation, after ``--model-ms``."""
        time.sleep(delay_s)
        if "Markdown memory documents" in str(request["messages"][0]["content"]):
            return patch
        return echo_facts_handler(request)

    bench.fake.set_chat_handler(model)
    try:
        db_url = bench.fresh_database()
        settings = Settings(
            data_dir=bench.workdir / "data",
            redis=RedisSettings(url=bench.redis_url),
            database=DatabaseSettings(url=db_url),
            metrics=MetricsSettings(port=0),
            model=ModelSettings(base_url=bench.fake.base_url, api_key=SecretStr("bench"), name="bench-flash"),
            sessions=SessionSettings(memory_auto="on"),
        )
        env = {**os.environ, **settings_env(settings), "QWEN_AUDIO_MEMORY_AUTO": "on"}
        model_pool, cheap_pool = worker_pools(
            settings.workers, 1, args.threads, knowledge_on=settings.knowledge.enabled
        )
        for pool, kind in ((model_pool, "model"), (cheap_pool, "cheap")):
            for restart in (False, True):
                name = f"{kind}-{'restarted' if restart else 'long-lived'}"
                extra = dict(pool.env)
                if restart or kind == "cheap":
                    extra["MEMJOBS_METRICS_ENDPOINT"] = "false"
                groups.append(Group(name, pool.command, {**env, **extra}, bench.workdir / f"{name}.log", restart))
        for g in groups:
            g.start()
        client = redis.Redis.from_url(bench.redis_url)
        load = Load(settings, bench.redis_url, args.rate, args.owners)
        load.start()
        print(
            f"soak: {args.minutes} min, {args.rate} calls/s from {args.owners} owners, "
            f"restarts every {args.restart_every} s, samples every {args.interval} s, "
            f"{os.cpu_count()} CPUs (shared: timings are noisy) → {out_path}",
            flush=True,
        )
        started = time.monotonic()
        end = started + args.minutes * 60
        next_sample, next_restart, restart_i = started, started + args.restart_every, 0
        samples: list[dict[str, Any]] = []
        while time.monotonic() < end + 0.5:
            now = time.monotonic()
            if now >= next_restart:
                restarted = [g for g in groups if g.restart]
                g = restarted[restart_i % len(restarted)]
                restart_i += 1
                g.stop()
                g.start()
                g.restarts += 1
                next_restart += args.restart_every / len(restarted)
            if now >= next_sample:
                s = sample(now - started, groups, client, db_url, load)
                samples.append(s)
                with out_path.open("a") as f:
                    f.write(json.dumps(s) + "\n")
                print(line(s), flush=True)
                next_sample += args.interval
            time.sleep(0.2)
        load.stop_event.set()
        load.join(30)
        return report(samples, args)
    finally:
        if load is not None:
            load.stop_event.set()
        for g in groups:
            g.stop()
        bench.close()


def report(samples: list[dict[str, Any]], args: argparse.Namespace) -> int:
    total_s = samples[-1]["t_s"] if samples else 0
    warmup_s = max(total_s / 4, 120 if total_s > 480 else 0)
    print(f"after warm-up ({warmup_s / 60:.1f} min), first third against last third:")
    ok = True
    for name, early, late, flat in flatness(samples, warmup_s):
        change = (late - early) / early * 100 if early else 0.0
        print(f"  {'flat ' if flat else 'GROWS'} {name}: {early:.2f} → {late:.2f} ({change:+.1f} %)")
        ok &= flat
    last = samples[-1]["redis"]["keys_without_ttl"] if samples else {}
    if last:
        print(f"  keys that must expire but carry no TTL: {last}")
        ok = False
    if samples and samples[-1]["dead"]:
        print(f"  dead letters by queue: {samples[-1]['dead']}")
    print("memory flat" if ok else "memory NOT flat")
    if args.plot_to:
        plot(samples, Path(args.plot_to))
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate", type=float, default=10, help="producer calls per second")
    parser.add_argument("--owners", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--model-ms", type=int, default=20)
    parser.add_argument(
        "--restart-every", type=float, default=300, help="seconds between two restarts of each restarted group"
    )
    parser.add_argument("--interval", type=float, default=60, help="seconds between samples")
    parser.add_argument("--out", default="soak-memory.jsonl")
    parser.add_argument("--plot-to", default="", help="draw an SVG (and PNG) here at the end")
    parser.add_argument("--plot", default="", help="only draw --plot-to from this JSON-lines file")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (worker logs)")
    args = parser.parse_args()
    if args.plot:
        samples = [json.loads(x) for x in Path(args.plot).read_text().splitlines() if x.strip()]
        args.plot_to = args.plot_to or str(REPO / "docs" / "img" / "soak-memory.svg")
        return report(samples, args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
