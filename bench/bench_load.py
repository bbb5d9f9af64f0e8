"""Benchmark: memjobs under real load, side by side with mem0 inline, in one run.

Real worker processes (``dramatiq memjobs_worker.app``, the cheap queues in a
pool of their own, as a host with more than 4 cores and 8 GiB runs them;
``--layout shared``: every pool in one process, as ``memjobs up`` runs them on
a smaller host), an embedded Redis and
PostgreSQL, and the local model stand-in answering every chat call after
``--model-ms`` milliseconds. Prints:

  stock     stock Dramatiq's no-op actor (bench/stock_noop.py), 1 process x
            --threads, the same backlog of N jobs enqueued while it is paused,
            then released: jobs/s, against which remember is set;
  backlog   N sources from M owners enqueued while the (warm) workers are
            paused, then released: remember jobs/s while extraction runs beside them
            (and its ratio to the stock no-op), sources learned/s, chat calls per
            source and CPU ms per learned source (model on), and learned/s with
            the model off;
  steady    a gateway sending --rate sources/s from M owners for --seconds:
            p50/p99 from `remember` returning to the source being in the
            ledger, p50/p95 to it being learned;
  inline    mem0's Memory.add called inline for each source from as many
            threads as the workers have, same model stand-in and database;
  scaling   the backlog with 1, 2 and 4 extraction processes;
  profile   with --profile, py-spy samples every worker process during the two
            backlogs, and the CPU time per learned source is broken down by
            where it goes (mem0, SQL, Redis, middleware, metrics, logging, ...).

    python bench/bench_load.py [--sources 3000] [--owners 100] [--threads 8] [--layout split|shared] [--profile]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("MEM0_TELEMETRY", "False")

import psycopg  # noqa: E402
import redis  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from memjobs_client.contracts import owner_key  # noqa: E402
from memjobs_worker.db import create_db_engine, migrate  # noqa: E402
from memjobs_worker.embedded import EmbeddedPostgres, EmbeddedRedis  # noqa: E402
from memjobs_worker.memory.build import build_engine  # noqa: E402
from memjobs_worker.memory.store.base import SourceRecord  # noqa: E402
from memjobs_worker.memory.store.schema import sources  # noqa: E402
from memjobs_worker.pools import WorkerPool, worker_command, worker_pools  # noqa: E402
from memjobs_worker.runtime import producer_client  # noqa: E402
from memjobs_worker.settings import Settings  # noqa: E402
from tests.support.bench_env import keep_or_remove, seconds_to_run  # noqa: E402
from tests.support.openai_server import FakeOpenAI, echo_facts_handler  # noqa: E402
from tests.support.settings import build as build_settings  # noqa: E402


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workdir = Path(tempfile.mkdtemp(prefix="memjobs-load-"))
        self.redis_server = EmbeddedRedis(self.workdir / "redis")
        self.pg_server = EmbeddedPostgres(self.workdir / "pg")
        self.fake = FakeOpenAI(embedding_dims=64).start()
        delay_s = args.model_ms / 1000

        def slow_echo(request: dict[str, Any]) -> str:
            time.sleep(delay_s)
            return echo_facts_handler(request)

        self.fake.set_chat_handler(slow_echo)
        self.redis_url = self.redis_server.start()
        self.pg_server.start()

    def close(self) -> None:
        self.fake.stop()
        self.pg_server.stop()
        self.redis_server.stop()
        keep_or_remove(self.workdir, self.args.keep, "profiles, worker.log")

    def settings(self, *, model: bool, database_url: str) -> Settings:
        # Embeddings from the stand-in service (64 dimensions), model on or off.
        extra: dict[str, Any] = {
            "embedding_base_url": self.fake.base_url,
            "embedding_api_key": "bench",
            "embedding_dims": 64,
        }
        if model:
            extra |= {"memory_base_url": self.fake.base_url, "memory_api_key": "bench", "memory_model": "bench-flash"}
        return build_settings(
            redis_url=self.redis_url,
            database_url=database_url,
            data_dir=self.workdir / f"data-{uuid.uuid4().hex[:6]}",
            metrics_port=0,
            **extra,
        )

    def fresh_database(self) -> str:
        name = f"load_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.pg_server.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = f"postgresql://postgres@127.0.0.1:{self.pg_server.port}/{name}"
        engine = create_db_engine(url)
        migrate(engine)
        engine.dispose()
        redis.Redis.from_url(self.redis_url).flushall()
        self.fake.requests.clear()
        return url

    @contextmanager
    def workers(self, settings: Settings, processes: int) -> Iterator[list[subprocess.Popen[bytes]]]:
        env = {**os.environ, **settings_env(settings)}
        log = open(self.workdir / "worker.log", "ab")  # noqa: SIM115
        if self.args.layout == "shared":  # every pool in one process, as on a small host by default
            pools = [WorkerPool(worker_command(processes, self.args.threads), {"MEMJOBS_WORKER_LAYOUT": "shared"})]
        else:
            pools = worker_pools(
                settings.workers, processes, self.args.threads, knowledge_on=settings.knowledge.enabled
            )
        procs = [
            subprocess.Popen(pool.command, env={**env, **pool.env}, stdout=log, stderr=log, start_new_session=True)
            for pool in pools
        ]
        try:
            yield procs
        finally:
            for p in procs:
                os.killpg(p.pid, signal.SIGTERM)
            for p in procs:
                p.wait(timeout=60)
            log.close()

    # -- scenarios -------------------------------------------------------------

    def stock(self, n: int) -> dict[str, float]:
        """Stock Dramatiq's no-op, 1 process x --threads, run as the backlog is:
        warm (a probe run), paused while N jobs are enqueued, released; jobs/s
        until the last is acknowledged."""
        redis.Redis.from_url(self.redis_url).flushall()
        os.environ["STOCK_REDIS_URL"] = self.redis_url
        sys.path.insert(0, str(REPO / "bench"))
        import stock_noop  # noqa: PLC0415  (its broker reads the URL above)

        probe = redis.Redis.from_url(self.redis_url)
        stored = f"{stock_noop.NAMESPACE}:{stock_noop.QUEUE}.msgs"
        log = open(self.workdir / "stock.log", "ab")  # noqa: SIM115
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dramatiq",
                "stock_noop",
                "--processes",
                "1",
                "--threads",
                str(self.args.threads),
                "--path",
                str(REPO / "bench"),
            ],
            env=dict(os.environ),
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        try:
            stock_noop.noop.send({"i": -1})
            wait_for_empty(probe, stored)
            os.killpg(proc.pid, signal.SIGSTOP)
            for i in range(n):
                stock_noop.noop.send({"i": i})
            cpu_before = cpu_of_group(proc.pid)
            started = time.perf_counter()
            os.killpg(proc.pid, signal.SIGCONT)
            wait_for_empty(probe, stored, poll_s=0.02)
            elapsed = time.perf_counter() - started
            cpu_ms = (cpu_of_group(proc.pid) - cpu_before) * 1000 / os.sysconf("SC_CLK_TCK") / n
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
            log.close()
            stock_noop.broker.close()
        return {"jobs_per_s": n / elapsed, "cpu_ms": cpu_ms}

    def backlog(self, *, model: bool, processes: int, n: int) -> dict[str, Any]:
        """Workers up and warm (a probe source learned), then paused (SIGSTOP)
        while N sources are enqueued, then released: remember/s counts until
        the last is in the ledger, learned/s until the last is learned, both
        from the release."""
        url = self.fresh_database()
        settings = self.settings(model=model, database_url=url)
        client = producer_client(
            settings.redis, settings.memory, settings.sessions, settings.knowledge, redis_url=self.redis_url
        )
        owners = [f"owner-{i}" for i in range(self.args.owners)]
        db = create_db_engine(url, pool_size=1)
        with self.workers(settings, processes) as procs:
            wait_until_warm(db, client)
            self.fake.requests.clear()
            # Paused (SIGSTOP) while the backlog is enqueued, then released.
            for p in procs:
                os.killpg(p.pid, signal.SIGSTOP)
            for i in range(n):
                client.remember(owners[i % len(owners)], f"backlog fact {i}: I keep item {i} on shelf {i % 7}")
            spies = self.profile(procs, "model-on" if model else "model-off")
            cpu_before = cpu_by_role(procs)
            started = time.perf_counter()
            for p in procs:
                os.killpg(p.pid, signal.SIGCONT)
            in_ledger_s = learned_s = None
            marks: dict[int, float] = {}  # when 10/50/90 % were learned
            while learned_s is None:
                total, learned = ledger_counts(db)
                now = time.perf_counter() - started
                if in_ledger_s is None and total >= n + 1:
                    in_ledger_s = now
                for share in (10, 50, 90):
                    if share not in marks and learned - 1 >= n * share / 100:
                        marks[share] = now
                if learned >= n + 1:
                    learned_s = now
                time.sleep(0.02)
            cpu = {role: ticks - cpu_before.get(role, 0) for role, ticks in cpu_by_role(procs).items()}
            for spy in spies:
                spy.send_signal(signal.SIGINT)  # py-spy writes its samples and exits
                spy.wait(timeout=60)
        db.dispose()
        calls = len(self.fake.requests_for("chat"))
        tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
        return {
            "remember_per_s": n / (in_ledger_s or learned_s),
            "learned_per_s": n / learned_s,
            "chat_per_source": calls / n,
            "marks": marks,
            "learned_s": learned_s,
            "cpu_ms": {role: t * tick_ms / n for role, t in cpu.items() if t > 0},
        }

    def profile(self, procs: list[subprocess.Popen[bytes]], name: str) -> list[subprocess.Popen[bytes]]:
        if not self.args.profile:
            return []
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        gil = ["--gil"] if self.args.gil else []  # only the thread holding the GIL: Python's CPU
        return [
            subprocess.Popen(
                [
                    spy,
                    "record",
                    "--format",
                    "raw",
                    "--rate",
                    "250",
                    "--subprocesses",
                    "--nonblocking",
                    *gil,
                    "-o",
                    str(self.workdir / f"{name}-{p.pid}.txt"),
                    "--pid",
                    str(p.pid),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for p in procs
        ]

    def profile_report(self, name: str, learned: int) -> str:
        samples = collections.Counter[str]()
        for path in self.workdir.glob(f"{name}-*.txt"):
            for line in path.read_text(errors="replace").splitlines():
                stack, _, count = line.rpartition(" ")
                if stack and count.isdigit():
                    samples[categorise(stack)] += int(count)
        total = sum(samples.values())
        if not total:
            return f"profile {name}: no samples (is py-spy allowed to attach here?)"
        ms = {cat: n * 4.0 / learned for cat, n in samples.items()}  # 250 Hz: 4 ms a sample
        parts = ", ".join(f"{cat} {v:.2f}" for cat, v in sorted(ms.items(), key=lambda kv: -kv[1]) if v >= 0.01)
        return f"profile {name}: {sum(ms.values()):.2f} ms of worker CPU per learned source = {parts}"

    def steady(self) -> dict[str, float]:
        url = self.fresh_database()
        settings = self.settings(model=True, database_url=url)
        client = producer_client(
            settings.redis, settings.memory, settings.sessions, settings.knowledge, redis_url=self.redis_url
        )
        owners = [f"steady-{i}" for i in range(self.args.owners)]
        total = self.args.rate * self.args.seconds
        returned: dict[str, float] = {}
        db = create_db_engine(url, pool_size=1)
        with self.workers(settings, 1):
            wait_until_warm(db, client)
            start = time.time()
            for i in range(total):
                due = start + i / self.args.rate
                pause = due - time.time()
                if pause > 0:
                    time.sleep(pause)
                sid = client.remember(owners[i % len(owners)], f"steady fact {i}: the code word is tulip-{i}")
                returned[sid] = time.time()
            while ledger_counts(db)[1] < total + 1:
                time.sleep(0.1)
        with db.connect() as conn:
            rows = [
                r
                for r in conn.execute(
                    sa.select(sources.c.owner_key, sources.c.source_id, sources.c.created_at, sources.c.learned_at)
                ).all()
                if r.source_id in returned
            ]
        db.dispose()
        to_ledger = sorted(r.created_at.timestamp() - returned[r.source_id] for r in rows)
        to_learned = sorted(r.learned_at.timestamp() - returned[r.source_id] for r in rows)
        calls = len(self.fake.requests_for("chat"))
        # A batch's sources are learned in one commit: one learned_at per owner's batch.
        batches = sorted(collections.Counter((r.owner_key, r.learned_at) for r in rows).values())
        print(
            f"  sources per batch: p10 {pct(batches, 10):.0f}, p50 {pct(batches, 50):.0f}, "
            f"p90 {pct(batches, 90):.0f}; {batches.count(1)} of {len(batches)} batches of one",
            flush=True,
        )
        return {
            "ledger_p50_s": pct(to_ledger, 50),
            "ledger_p99_s": pct(to_ledger, 99),
            "learned_p50_s": pct(to_learned, 50),
            "learned_p95_s": pct(to_learned, 95),
            "chat_per_source": calls / total,
        }

    def inline(self, n: int) -> float:
        """mem0's Memory.add per source, inline, from --threads threads."""
        url = self.fresh_database()
        settings = self.settings(model=True, database_url=url)
        engine = build_engine(
            settings.memory, settings.model, settings.embedding, database_url=url, data_dir=settings.data_dir
        )
        now = datetime.now(UTC)
        batch = [
            SourceRecord(
                f"src_{i}",
                owner_key(f"inline-{i % self.args.owners}"),
                "pending",
                "utterance",
                None,
                f"inline fact {i}: I keep item {i} on shelf {i % 7}",
                now,
                now,
                None,
            )
            for i in range(n)
        ]
        first = batch.pop()  # creates mem0's collection before the threads race to
        engine.extract(first.owner_key, uuid.uuid4().hex, [first])
        n -= 1
        lock = threading.Lock()

        def work() -> None:
            while True:
                with lock:
                    if not batch:
                        return
                    source = batch.pop()
                engine.extract(source.owner_key, uuid.uuid4().hex, [source])

        elapsed = seconds_to_run([threading.Thread(target=work) for _ in range(self.args.threads)])
        engine.close()
        return n / elapsed


def settings_env(settings: Settings) -> dict[str, str]:
    env = {
        "MEMJOBS_REDIS_URL": settings.redis.url or "",
        "MEMJOBS_DATABASE_URL": settings.database.url or "",
        "MEMJOBS_DATA_DIR": str(settings.data_dir),
        "MEMJOBS_METRICS_PORT": "0",
        "MEMJOBS_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
        "MEMJOBS_EMBEDDING_BASE_URL": settings.embedding.base_url or "",
        "MEMJOBS_EMBEDDING_API_KEY": "bench",
        "MEMJOBS_EMBEDDING_DIMS": str(settings.embedding.dims),
    }
    if settings.model_configured:
        env.update(
            {
                "QWEN_AUDIO_MEMORY_BASE_URL": settings.model.base_url,
                "QWEN_AUDIO_MEMORY_API_KEY": "bench",
                "QWEN_AUDIO_MEMORY_MODEL": settings.model.name,
            }
        )
    return env


def cpu_by_role(workers: list[subprocess.Popen[bytes]]) -> dict[str, int]:
    """CPU ticks (user + system, exited children included) of every process on
    the machine, by its role in the run: the worker pools, PostgreSQL, Redis,
    this process (the producer and the model stand-in), the rest."""
    # Popen types args as any command form; these were started with a list.
    pools = {
        p.pid: "cheap pool" if "memjobs_remember" in " ".join(map(str, p.args)) else "model pool"  # type: ignore[arg-type]
        for p in workers
    }
    ticks: dict[str, int] = collections.Counter()
    for pid, comm, pgid, used in _processes():
        if pid == os.getpid():
            role = "producer + model stand-in"
        elif pgid in pools:
            role = pools[pgid]
        elif comm.startswith("postgres") or comm.startswith("postmaster"):
            role = "PostgreSQL"
        elif comm.startswith("redis"):
            role = "Redis"
        elif comm == "py-spy":
            role = "py-spy"
        else:
            role = "other"
        ticks[role] += used
    return dict(ticks)


def _processes() -> Iterator[tuple[int, str, int, int]]:
    """Every process on the machine: pid, command name, process group, and CPU
    ticks (user + system, exited children included), from /proc."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        yield (
            int(proc.name),
            stat[stat.index("(") + 1 : stat.rindex(")")],
            int(fields[2]),
            sum(int(f) for f in fields[11:15]),
        )


def cpu_of_group(pgid: int) -> int:
    """CPU ticks of every process in the group ``pgid``."""
    ticks = 0
    for _pid, _comm, group, used in _processes():
        if group == pgid:
            ticks += used
    return ticks


def wait_for_empty(client: redis.Redis, stored: str, poll_s: float = 0.05, timeout_s: float = 120) -> None:
    """Until Dramatiq's hash of stored messages ``stored`` is empty (every job acknowledged)."""
    deadline = time.time() + timeout_s
    while client.hlen(stored):
        if time.time() > deadline:
            raise TimeoutError(f"{stored} still holds messages after {timeout_s} s")
        time.sleep(poll_s)


def ledger_counts(db: sa.Engine) -> tuple[int, int]:
    with db.connect() as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(sources)).scalar_one()
        learned = conn.execute(
            sa.select(sa.func.count()).select_from(sources).where(sources.c.state == "learned")
        ).scalar_one()
    return int(total), int(learned)


def wait_until_warm(db: sa.Engine, client: Any) -> None:
    """Until the workers have learned one probe source (mem0 loaded, pools up)."""
    client.remember("probe-owner", "a probe to know the workers are warm")
    deadline = time.time() + 300
    while ledger_counts(db)[1] < 1:
        if time.time() > deadline:
            raise TimeoutError("the workers did not learn the probe source in 300 s")
        time.sleep(0.05)


#: Where a sample's time goes, by the innermost frame that names a library (first match).
_CATEGORIES = (
    ("embedder", ("offline_embedder", "numpy")),
    ("model client", ("openai", "httpx", "httpcore", "tenacity")),
    ("mem0", ("mem0",)),
    ("SQL", ("sqlalchemy", "psycopg", "alembic")),
    ("Redis", ("redis",)),
    ("metrics", ("prometheus_client", "jobstats", "observability")),
    ("logging", ("logging", "memjobs_worker/logs", "memjobs_worker.logs")),
    ("JSON/validation", ("json", "pydantic")),
    ("sensitive check", ("memjobs_client/sensitive", "memjobs_client.sensitive", " re.py", "(re)")),
    ("Dramatiq", ("dramatiq",)),
)


def categorise(stack: str) -> str:
    """The innermost library a sample was in, prefixed by ``mem0/`` when mem0
    called it (mem0's own SQL against pgvector is not the ledger's)."""
    frames = stack.split(";")
    inside_mem0 = any("mem0" in f for f in frames)
    for frame in reversed(frames):
        for name, needles in _CATEGORIES:
            if any(n in frame for n in needles):
                return name if name == "mem0" or not inside_mem0 else f"mem0/{name}"
    return "other"


#: CPU that is not memjobs': the rest of the machine, the sampler, this process.
_NOT_MEMJOBS = ("other", "py-spy", "producer + model stand-in")


def cpu_line(cpu_ms: dict[str, float]) -> str:
    """memjobs' CPU per learned source (its worker pools, PostgreSQL, Redis), then the rest."""
    ours = {role: ms for role, ms in cpu_ms.items() if role not in _NOT_MEMJOBS}
    parts = ", ".join(f"{role} {ms:.2f}" for role, ms in sorted(ours.items(), key=lambda kv: -kv[1]))
    rest = ", ".join(f"{role} {cpu_ms[role]:.2f}" for role in _NOT_MEMJOBS if role in cpu_ms)
    return f"{sum(ours.values()):.2f} = {parts} (not memjobs': {rest})"


def timeline(run: dict[str, Any]) -> str:
    """When 10, 50 and 90 % of the backlog was learned, and the last: the ramp
    (batches filling) against the pace once they are full."""
    marks = run["marks"]
    return (
        f"learned 10 % at {marks[10]:.2f} s, 50 % at {marks[50]:.2f} s, "
        f"90 % at {marks[90]:.2f} s, all at {run['learned_s']:.2f} s"
    )


def pct(values: Sequence[float], p: float) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


def steady_line(args: argparse.Namespace, steady: dict[str, float]) -> str:
    return (
        f"steady {args.rate}/s x {args.seconds} s: ledger p50 {steady['ledger_p50_s']:.3f} s, "
        f"p99 {steady['ledger_p99_s']:.3f} s; learned p50 {steady['learned_p50_s']:.2f} s, "
        f"p95 {steady['learned_p95_s']:.2f} s; {steady['chat_per_source']:.3f} chat calls/source"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sources", type=int, default=3000)
    parser.add_argument("--owners", type=int, default=100)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--model-ms", type=int, default=100)
    parser.add_argument("--rate", type=int, default=100)
    # Sustained: a minute, so that each owner's first source (learned alone,
    # with no pace to read yet) and the last batch weigh as they would in a
    # steady state, not a third of a 10 s run's batches.
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--inline-sources", type=int, default=400)
    parser.add_argument("--scaling", default="1,2,4")
    parser.add_argument("--profile", action="store_true", help="sample the workers with py-spy")
    parser.add_argument("--gil", action="store_true", help="with --profile: sample only the thread holding the GIL")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (raw profiles)")
    parser.add_argument("--only-backlog", action="store_true", help="skip inline, steady and scaling")
    parser.add_argument("--only-steady", action="store_true", help="the steady load alone")
    parser.add_argument(
        "--layout",
        choices=("split", "shared"),
        default="split",
        help="the workers' pools in processes of their own (split), or all in one (shared: a small host's default)",
    )
    args = parser.parse_args()
    bench = Bench(args)
    try:
        print(
            f"memjobs load benchmark: {args.sources} sources, {args.owners} owners, "
            f"{args.threads} threads per process, pools {args.layout}, model {args.model_ms} ms, "
            f"{os.cpu_count()} CPUs, "
            "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()),
            flush=True,
        )
        if args.only_steady:
            print(steady_line(args, bench.steady()), flush=True)
            return 0
        stock = bench.stock(args.sources)
        print(
            f"stock Dramatiq no-op, 1 x {args.threads}: {stock['jobs_per_s']:7.0f} jobs/s "
            f"({stock['cpu_ms']:.2f} ms CPU a job)",
            flush=True,
        )
        on = bench.backlog(model=True, processes=1, n=args.sources)
        print(
            f"backlog, model on : remember {on['remember_per_s']:7.0f}/s while extracting "
            f"({on['remember_per_s'] / stock['jobs_per_s']:.2f}x the stock no-op), "
            f"learned {on['learned_per_s']:6.1f}/s, {on['chat_per_source']:.3f} chat calls/source",
            flush=True,
        )
        print("  CPU ms per learned source: " + cpu_line(on["cpu_ms"]), flush=True)
        print("  " + timeline(on), flush=True)
        off = bench.backlog(model=False, processes=1, n=args.sources)
        print(
            f"backlog, model off: remember {off['remember_per_s']:7.0f}/s while extracting, "
            f"learned {off['learned_per_s']:6.1f}/s",
            flush=True,
        )
        print("  CPU ms per learned source: " + cpu_line(off["cpu_ms"]), flush=True)
        print("  " + timeline(off), flush=True)
        if args.profile:
            print(bench.profile_report("model-on", args.sources), flush=True)
            print(bench.profile_report("model-off", args.sources), flush=True)
        if args.only_backlog:
            return 0
        inline = bench.inline(args.inline_sources)
        print(
            f"mem0 inline       : {inline:6.1f} sources/s from {args.threads} threads "
            f"(memjobs/inline = {on['learned_per_s'] / inline:.1f}x)",
            flush=True,
        )
        print(steady_line(args, bench.steady()), flush=True)
        for processes in (int(p) for p in args.scaling.split(",") if p):
            run = bench.backlog(model=True, processes=processes, n=args.sources // 2)
            print(
                f"scaling, {processes} extraction process(es): learned {run['learned_per_s']:6.1f}/s, "
                f"remember {run['remember_per_s']:7.0f}/s",
                flush=True,
            )
        return 0
    finally:
        bench.close()


if __name__ == "__main__":
    sys.exit(main())
