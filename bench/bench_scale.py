"""Scale: a backlog of 100,000 queued sources, and a model outage under steady load.

Everything runs here, on 127.0.0.1: its own Redis and PostgreSQL (embedded, in a
scratch directory), the worker pools as ``memjobs up`` runs them, a ``memjobs api``
process (gateway and host tokens set) and, for the outage, the model stand-in of
the tests (tests/support/openai_server.py) for chat and embeddings.

backlog (``--backlog``)
    With no worker running, ``--messages`` remembers from ``--owners`` owners are
    queued through ``MemjobsClient.remember`` (``--threads`` threads, one client).
    With the backlog in place: forgets of queued sources through ``POST /v1/forget``
    and through the doors' forget service (``PersonalMemory.forget``, what the CLI
    and the API call, in this process; a few real ``memjobs forget`` commands too), forgets of sources never sent
    (must be ``not_found``), ``memjobs status`` (the command, timed), ``/readyz`` and
    the console's overview (logged in with the host token), p50/p99 each; Redis
    ``used_memory`` before and after queuing. Then the workers start (no model:
    the hashed embedder, sources stored verbatim) and, once every source is final
    (bounded), the promises are checked on the ledger: every forgotten source is
    ``forgotten`` and was never learned, every other source learned exactly once
    (one committed extraction attempt names it).

outage (``--outage``)
    Workers on the stand-in model; a producer sends ``--rate`` remembers/s across
    ``--load-owners`` owners throughout. After a steady start the stand-in answers
    500 to every call for ``--outage-seconds``, then recovers. Figures: model calls
    during the outage (and per second), the most extraction messages queued for one
    owner (Dramatiq's message hashes sampled every ``--sample-seconds``), dead
    letters, time from the model's return until every source sent is final, and
    whether each was learned exactly once. ``--max-retries N`` sets
    ``MEMJOBS_MAX_RETRIES`` for the workers (default: theirs).

    .venv/bin/python bench/bench_scale.py --backlog [--messages 100000 --owners 10000]
    .venv/bin/python bench/bench_scale.py --outage [--outage-seconds 600 --rate 20] [--max-retries 1]

Every wait is bounded; ``--timeout`` (seconds) bounds the whole run. Figures are
in docs/benchmarks.md ("Scale: backlog of 100,000 and a model outage").
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("MEM0_TELEMETRY", "False")

import httpx  # noqa: E402
import psycopg  # noqa: E402
import redis  # noqa: E402

from memjobs_client import MemjobsClient, keys  # noqa: E402
from memjobs_client.contracts import QUEUE_EXTRACT, QUEUES, owner_key, source_id_for  # noqa: E402
from memjobs_client.errors import MemjobsError  # noqa: E402
from memjobs_worker.db import create_db_engine, migrate  # noqa: E402
from memjobs_worker.embedded import EmbeddedPostgres, EmbeddedRedis  # noqa: E402
from memjobs_worker.embedded.process import free_port  # noqa: E402
from memjobs_worker.pools import worker_pools  # noqa: E402
from memjobs_worker.settings import Settings  # noqa: E402
from tests.support.bench_env import keep_or_remove  # noqa: E402
from tests.support.openai_server import FakeOpenAI, echo_facts_handler  # noqa: E402
from tests.support.redis_values import as_bytes  # noqa: E402

#: What a forget may answer, at any door, on this tree or a later one.
FOUND = ("forgotten", "already_forgotten", "queued")
GATEWAY_TOKEN = secrets.token_urlsafe(24)
HOST_TOKEN = secrets.token_urlsafe(24)


class Deadline:
    """The run's budget: every wait asks how much is left."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self, cap: float | None = None) -> float:
        left = max(0.0, self.end - time.monotonic())
        return left if cap is None else min(cap, left)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] if ordered else float("nan")


def latency(name: str, seconds: list[float]) -> str:
    return (
        f"{name:<44} p50 {pct(seconds, 50) * 1000:8.1f} ms   p99 {pct(seconds, 99) * 1000:8.1f} ms"
        f"   ({len(seconds)} calls)"
    )


def verdict(ok: bool, promise: str, detail: str) -> None:
    print(f"VERDICT {'PASS' if ok else 'FAIL'}: {promise} -- {detail}", flush=True)


class Stack:
    """Redis, PostgreSQL, the workers (started on demand), the API and the stand-in."""

    def __init__(self, args: argparse.Namespace, *, model: bool) -> None:
        self.args = args
        self.base = Path(tempfile.mkdtemp(prefix="memjobs-bench-scale-"))
        self.base.chmod(0o755)
        self.rds = EmbeddedRedis(self.base / "redis")
        self.pg = EmbeddedPostgres(self.base / "pg")
        self.model = FakeOpenAI(embedding_dims=64).start() if model else None
        self.workers: list[subprocess.Popen[bytes]] = []
        self.api: subprocess.Popen[bytes] | None = None
        self.api_url = ""
        self.redis_url = self.rds.start()
        self.pg_url = self.pg.start()
        engine = create_db_engine(self.pg_url, pool_size=1)
        migrate(engine)
        engine.dispose()
        self.redis = redis.Redis.from_url(self.redis_url)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMJOBS_", "QWEN_", "DASHSCOPE"))}
        env.update(
            PYTHONPATH=str(REPO),
            MEMJOBS_REDIS_URL=self.redis_url,
            MEMJOBS_DATABASE_URL=self.pg_url,
            MEMJOBS_DATA_DIR=str(self.base / "data"),
            MEMJOBS_METRICS="off",
            MEMJOBS_KNOWLEDGE="off",
            MEMJOBS_LOG_LEVEL="WARNING",
            MEM0_TELEMETRY="False",
            MEMJOBS_API_GATEWAY_TOKEN=GATEWAY_TOKEN,
            MEMJOBS_API_HOST_TOKEN=HOST_TOKEN,
        )
        if self.model is not None:
            self.model.set_chat_handler(echo_facts_handler)
            env.update(
                QWEN_AUDIO_MEMORY_BASE_URL=self.model.base_url,
                QWEN_AUDIO_MEMORY_API_KEY="bench",
                QWEN_AUDIO_MEMORY_MODEL="bench-flash",
                MEMJOBS_EMBEDDING_BASE_URL=self.model.base_url,
                MEMJOBS_EMBEDDING_API_KEY="bench",
                MEMJOBS_EMBEDDING_MODEL="bench-embed",
                MEMJOBS_EMBEDDING_DIMS="64",
            )
        else:
            env.update(MEMJOBS_LOCAL_EMBEDDER="hashing")
        if args.max_retries is not None:
            env["MEMJOBS_MAX_RETRIES"] = str(args.max_retries)
        self.env = env
        self.log = open(self.base / "processes.log", "ab")  # noqa: SIM115 - for the run's lifetime

    def settings(self) -> Settings:
        """The settings the workers read (from the same environment)."""
        saved = dict(os.environ)
        try:
            os.environ.clear()
            os.environ.update(self.env)
            return Settings()
        finally:
            os.environ.clear()
            os.environ.update(saved)

    def start_workers(self) -> None:
        settings = self.settings()
        for pool in worker_pools(
            settings.workers,
            settings.workers.worker_processes,
            settings.workers.worker_threads,
            knowledge_on=settings.knowledge.enabled,
        ):
            self.workers.append(
                subprocess.Popen(
                    pool.command,
                    env={**self.env, **pool.env},
                    cwd=REPO,
                    stdout=self.log,
                    stderr=self.log,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )

    def stop_workers(self) -> None:
        for p in self.workers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.workers:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        self.workers = []

    def start_api(self, deadline: Deadline) -> None:
        port = free_port()
        self.api = subprocess.Popen(
            [sys.executable, "-m", "memjobs_worker.cli.main", "api", "--host", "127.0.0.1", "--port", str(port)],
            env=self.env,
            cwd=REPO,
            stdout=self.log,
            stderr=self.log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.api_url = f"http://127.0.0.1:{port}"
        until = time.monotonic() + deadline.left(120)
        while time.monotonic() < until:
            try:
                if httpx.get(f"{self.api_url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.api.poll() is not None:
                raise SystemExit(f"memjobs api exited; see {self.base / 'processes.log'}")
            time.sleep(0.2)
        raise SystemExit("memjobs api not ready in 120 s")

    def cli(self, *argv: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memjobs_worker.cli.main", *argv],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def used_memory(self) -> int:
        return int(self.redis.info("memory")["used_memory"])

    def dead_letters(self) -> int:
        return sum(self.dead_by_queue().values())

    def dead_by_queue(self) -> dict[str, int]:
        counts = {q: int(self.redis.zcard(keys.dead_letters(q))) for q in QUEUES}
        return {q: n for q, n in counts.items() if n}

    def close(self) -> None:
        self.stop_workers()
        if self.api is not None and self.api.poll() is None:
            self.api.send_signal(signal.SIGTERM)
            try:
                self.api.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.api.pid, signal.SIGKILL)
        if self.model is not None:
            self.model.stop()
        self.redis.close()
        self.pg.stop()
        self.rds.stop()
        self.log.close()
        keep_or_remove(self.base, self.args.keep, "processes.log")


# -- the ledger, read from the database ------------------------------------------


def ledger(pg_url: str) -> dict[tuple[str, str], str]:
    """(owner key, source id) -> state, every source in the ledger."""
    with psycopg.connect(pg_url, connect_timeout=5) as conn:
        rows = conn.execute("SELECT owner_key, source_id, state FROM sources")
        return {(str(o), str(s)): str(st) for o, s, st in rows}


def committed(pg_url: str) -> collections.Counter[tuple[str, str]]:
    """How many committed extraction attempts name each (owner key, source id)."""
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    with psycopg.connect(pg_url, connect_timeout=5) as conn:
        for owner, ids in conn.execute("SELECT owner_key, source_ids FROM attempts WHERE state = 'committed'"):
            for sid in json.loads(ids) if isinstance(ids, str) else ids:
                counts[(str(owner), str(sid))] += 1
    return counts


def provenance(pg_url: str) -> set[tuple[str, str]]:
    with psycopg.connect(pg_url, connect_timeout=5) as conn:
        return {(str(o), str(s)) for o, s in conn.execute("SELECT DISTINCT owner_key, source_id FROM provenance")}


def wait_final(
    pg_url: str,
    sent: Iterable[tuple[str, str]],
    seconds: float,
    poll_s: float = 1.0,
    progress: Callable[[dict[str, int]], None] | None = None,
) -> tuple[bool, dict[str, int]]:
    """Until every sent source is in the ledger and none is pending; at most ``seconds``."""
    wanted = list(sent)
    until = time.monotonic() + seconds
    states: dict[str, int] = {}
    last_report = time.monotonic()
    while True:
        try:
            found = ledger(pg_url)
        except psycopg.Error:
            found = None
        if found is not None:
            states = dict(collections.Counter(found.get(k, "missing") for k in wanted))
            if not states.get("pending") and not states.get("missing"):
                return True, states
        if time.monotonic() >= until:
            return False, states
        if progress is not None and time.monotonic() - last_report > 30:
            progress(states)
            last_report = time.monotonic()
        time.sleep(poll_s)


# -- part 1: the backlog ------------------------------------------------------


def backlog_text(i: int) -> str:
    return f"backlog fact {i}: I keep item {i} on shelf {i % 7}"


def queue_backlog(client: MemjobsClient, n: int, owners: int, threads: int) -> list[tuple[str, str, str]]:
    """(owner id, owner key, source id) of each remember, in order; from ``threads`` threads."""
    sent: list[tuple[str, str, str] | None] = [None] * n

    def run(start: int) -> None:
        for i in range(start, n, threads):
            owner = f"scale-owner-{i % owners}"
            sid = client.remember(owner, backlog_text(i))
            sent[i] = (owner, owner_key(owner), sid)

    with ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(run, t) for t in range(threads)]:
            f.result()
    return [s for s in sent if s is not None]


def http_forget(http: httpx.Client, owner: str, sid: str) -> tuple[float, str]:
    started = time.perf_counter()
    r = http.post("/v1/forget", json={"owner_id": owner, "source_id": sid})
    took = time.perf_counter() - started
    if r.status_code == 404:
        return took, "not_found"
    if r.status_code >= 300:
        return took, f"http_{r.status_code}"
    return took, str(r.json().get("status"))


def door_forget(memory: Any, owner: str, sid: str) -> tuple[float, str]:
    """One forget through the doors' service (what the CLI and the HTTP API call):
    the producer client only queues a forget (it answers ``queued``)."""
    started = time.perf_counter()
    try:
        status = memory.forget(owner, sid).status
    except MemjobsError as exc:
        status = f"error_{type(exc).__name__}"
    return time.perf_counter() - started, str(status)


def report_forgets(name: str, results: list[tuple[float, str]], expect: tuple[str, ...]) -> bool:
    answers = collections.Counter(st for _, st in results)
    print(latency(name, [t for t, _ in results]) + f"   answers {dict(answers)}", flush=True)
    return all(st in expect for _, st in results)


def backlog(args: argparse.Namespace, deadline: Deadline) -> None:
    from memjobs_worker.endpoints import resolve_endpoints
    from memjobs_worker.runtime import open_door

    stack = Stack(args, model=False)
    try:
        stack.start_api(deadline)
        client = MemjobsClient(stack.redis_url, timeout_s=10)
        before = stack.used_memory()
        started = time.perf_counter()
        sent = queue_backlog(client, args.messages, args.owners, args.threads)
        queued_s = time.perf_counter() - started
        after = stack.used_memory()
        print(
            f"queued {len(sent)} remembers from {args.owners} owners in {queued_s:.1f} s "
            f"({len(sent) / queued_s:.0f}/s, {args.threads} threads, workers not started)",
            flush=True,
        )
        print(
            f"Redis used_memory {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB: "
            f"{(after - before) / len(sent):.0f} B per queued remember",
            flush=True,
        )

        # Queued sources to forget, spread over the whole backlog (front to back).
        rng = random.Random(30)
        picks = sorted(rng.sample(range(len(sent)), 2 * args.forgets + args.cli_forgets))
        rng.shuffle(picks)
        via_http = [sent[i] for i in picks[: args.forgets]]
        via_door = [sent[i] for i in picks[args.forgets : 2 * args.forgets]]
        via_cli = [sent[i] for i in picks[2 * args.forgets :]]
        never = [(f"scale-owner-{i % args.owners}", f"never sent {i}") for i in range(args.forgets // 4 or 1)]
        never_ids = [(o, source_id_for(owner_key(o), t)) for o, t in never]
        positions = sorted(picks)
        print(
            f"forgetting {len(picks)} queued sources at backlog positions {positions[0]}..{positions[-1]} "
            f"(median {positions[len(positions) // 2]}), and {len(never_ids)} never sent",
            flush=True,
        )

        auth = {"Authorization": f"Bearer {GATEWAY_TOKEN}"}
        http = httpx.Client(base_url=stack.api_url, headers=auth, timeout=60)
        http_results = [http_forget(http, o, s) for o, _k, s in via_http]
        ok_http = report_forgets("POST /v1/forget, queued source", http_results, FOUND)
        http_never = [http_forget(http, o, s) for o, s in never_ids]
        ok_http_never = report_forgets("POST /v1/forget, never sent", http_never, ("not_found",))

        settings = stack.settings()
        door = open_door(settings, resolve_endpoints(settings.data_dir, settings.redis, settings.database))
        try:
            door_forget(door.personal_memory, *never_ids[0])  # the door's first call builds its ledger: not timed
            door_results = [door_forget(door.personal_memory, o, s) for o, _k, s in via_door]
            ok_door = report_forgets("the doors' forget service, queued source", door_results, FOUND)
            door_never = [door_forget(door.personal_memory, o, s) for o, s in never_ids]
            ok_door_never = report_forgets("the doors' forget service, never sent", door_never, ("not_found",))
        finally:
            door.close()
            door.client.close()
        cli_results = []
        for o, _k, s in via_cli:
            t0 = time.perf_counter()
            done = stack.cli("forget", "--owner", o, "--source", s, "--json", timeout_s=deadline.left(120))
            took = time.perf_counter() - t0
            try:
                cli_results.append((took, str(json.loads(done.stdout)["status"])))
            except (ValueError, KeyError):
                cli_results.append((took, f"exit_{done.returncode}"))
        ok_cli = report_forgets("memjobs forget (the command), queued source", cli_results, FOUND)
        forget_answers = http_results + door_results + cli_results
        targeted = via_http + via_door + via_cli
        not_found = sum(1 for _, st in forget_answers if st == "not_found")
        verdict(
            ok_http and ok_door and ok_cli,
            "a forget of a queued source is found at every door",
            f"{not_found} of {len(forget_answers)} answered not_found",
        )
        verdict(
            ok_http_never and ok_door_never,
            "a forget of a source never sent is not_found",
            f"{len(http_never) + len(door_never)} forgets",
        )

        status_s = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            done = stack.cli("status", timeout_s=deadline.left(120))
            status_s.append(time.perf_counter() - t0)
            if done.returncode != 0:
                print(f"memjobs status exited {done.returncode}: {done.stderr.strip()[-200:]}", flush=True)
        print(latency("memjobs status (the command)", status_s), flush=True)
        ready_s, codes = [], collections.Counter[int]()
        for _ in range(args.calls):
            t0 = time.perf_counter()
            codes[httpx.get(f"{stack.api_url}/readyz", timeout=60).status_code] += 1
            ready_s.append(time.perf_counter() - t0)
        print(latency("GET /readyz", ready_s) + f"   statuses {dict(codes)}", flush=True)
        console = httpx.Client(base_url=stack.api_url, timeout=60)
        login = console.post("/console/login", data={"token": HOST_TOKEN}, follow_redirects=False)
        if login.status_code != 303:
            print(f"console login answered {login.status_code}", flush=True)
        console_s, codes = [], collections.Counter[int]()
        for _ in range(args.calls):
            t0 = time.perf_counter()
            page = console.get("/console", follow_redirects=False)
            console_s.append(time.perf_counter() - t0)
            codes[page.status_code] += 1
        print(latency("GET /console (overview, logged in)", console_s) + f"   statuses {dict(codes)}", flush=True)
        console.close()

        # The workers take the backlog.
        stack.start_workers()
        released = time.perf_counter()
        wanted = [(k, s) for _o, k, s in sent]
        final, states = wait_final(
            stack.pg_url,
            wanted,
            deadline.left(args.final_timeout),
            poll_s=2.0,
            progress=lambda st: print(f"  ... {time.perf_counter() - released:.0f} s: {st}", flush=True),
        )
        took = time.perf_counter() - released
        print(
            f"workers started: {'every source final' if final else 'NOT every source final'} after {took:.1f} s "
            f"({len(sent) / took:.0f} sources/s); states {states}",
            flush=True,
        )
        verdict(final, "every queued source becomes final", f"states {states} after {took:.0f} s")

        found = ledger(stack.pg_url)
        counts = committed(stack.pg_url)
        derived = provenance(stack.pg_url)
        forgotten_keys = {(k, s) for _o, k, s in targeted}
        bad_forgotten = [
            (k, s) for k, s in forgotten_keys if found.get((k, s)) != "forgotten" or counts[(k, s)] or (k, s) in derived
        ]
        verdict(
            not bad_forgotten,
            "every source whose forget was asked is forgotten and never learned",
            f"{len(bad_forgotten)} of {len(forgotten_keys)} not (states "
            f"{dict(collections.Counter(found.get(x, 'missing') for x in bad_forgotten))}, "
            f"{sum(1 for x in bad_forgotten if counts[x])} learned)",
        )
        others = [k for k in wanted if k not in forgotten_keys]
        not_once = [k for k in others if found.get(k) != "learned" or counts[k] != 1]
        verdict(
            not not_once,
            "every other source learned exactly once",
            f"{len(not_once)} of {len(others)} not (states "
            f"{dict(collections.Counter(found.get(k, 'missing') for k in not_once))}, attempts "
            f"{dict(collections.Counter(counts[k] for k in not_once))})",
        )
        strays = [k for k in ((owner_key(o), s) for o, s in never_ids) if k in found]
        verdict(not strays, "a source never sent is not in the ledger", f"{len(strays)} found")
        # The owners' own view agrees (GET /v1/sources of a few owners whose sources were forgotten).
        sample = list(dict.fromkeys(o for o, _k, _s in targeted))[:20]
        disagree = 0
        for o in sample:
            r = http.get("/v1/sources", params={"limit": 200}, headers={"X-Memjobs-Owner": o})
            listed = (
                {x["source_id"]: x["state"] for x in r.json().get("sources", r.json().get("items", []))}
                if r.status_code == 200
                else {}
            )
            disagree += sum(1 for oo, k, s in targeted if oo == o and listed.get(s) != found.get((k, s)))
        verdict(
            disagree == 0,
            "GET /v1/sources agrees with the ledger for the forgotten sources",
            f"{len(sample)} owners, {disagree} disagreements",
        )
        print(f"dead letters {stack.dead_letters()}", flush=True)
        http.close()
        client.close()
    finally:
        stack.close()


# -- part 2: a model outage ------------------------------------------------------


class Producer(threading.Thread):
    """``rate`` remembers a second across ``owners`` owners until stopped."""

    def __init__(self, redis_url: str, owners: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.client = MemjobsClient(redis_url, timeout_s=5)
        self.owners, self.period = owners, 1.0 / rate
        self.sent: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.failures = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        i, start = 0, time.monotonic()
        while not self.stopping.wait(max(0.0, start + i * self.period - time.monotonic())):
            owner = f"load-owner-{i % self.owners}"
            try:
                sid = self.client.remember(owner, f"outage bench fact {i}: the code word is tulip-{i}")
                with self.lock:
                    self.sent.append((owner_key(owner), sid))
            except MemjobsError:
                self.failures += 1
            i += 1

    def snapshot(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.sent)


def extraction_per_owner(client: redis.Redis) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Extraction messages not yet acknowledged, by owner key: those waiting (ready
    or delayed) and, apart, those a worker holds (in flight, running)."""

    def held_now() -> set[bytes]:
        held: set[bytes] = set()
        for name in client.scan_iter(match=keys.ACKS_PATTERN, count=1000):
            if str(name, "utf-8", "replace").endswith(f".{QUEUE_EXTRACT}"):
                held |= {as_bytes(m) for m in client.smembers(name)}
        return held

    held = held_now()  # and again after the hashes: a message fetched while they were
    owners: dict[bytes, str] = {}  # read is running, not waiting  # by message id: a retry or a delayed message coming
    for name in (keys.messages(QUEUE_EXTRACT), keys.messages(f"{QUEUE_EXTRACT}.DQ")):  # due is in
        for mid, raw in client.hscan_iter(name, count=1000):  # both hashes for a moment
            try:
                owners[mid] = str(json.loads(raw)["args"][0].get("owner_key"))
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                owners[mid] = "?"
    held |= held_now()
    waiting: collections.Counter[str] = collections.Counter()
    running: collections.Counter[str] = collections.Counter()
    for mid, owner in owners.items():
        (running if mid in held else waiting)[owner] += 1
    return waiting, running


def outage(args: argparse.Namespace, deadline: Deadline) -> None:
    stack = Stack(args, model=True)
    model = stack.model
    assert model is not None
    producer = None
    try:
        stack.start_workers()
        probe = MemjobsClient(stack.redis_url, timeout_s=5)
        probe_id = probe.remember("probe-owner", "a probe to know the workers are warm")
        probe.close()
        ok, _ = wait_final(stack.pg_url, [(owner_key("probe-owner"), probe_id)], deadline.left(300), poll_s=0.2)
        if not ok:
            raise SystemExit(f"the workers did not learn a probe in 300 s; see {stack.base / 'processes.log'}")
        retries = args.max_retries if args.max_retries is not None else stack.settings().workers.max_retries
        print(
            f"outage: {args.rate:g} remembers/s over {args.load_owners} owners, stand-in model (chat and "
            f"embeddings), max_retries {retries}, outage {args.outage_seconds:g} s",
            flush=True,
        )
        producer = Producer(stack.redis_url, args.load_owners, args.rate)
        producer.start()
        time.sleep(min(args.steady_seconds, deadline.left()))
        calls_before = len(model.requests)
        model.fail_next("chat", 500, count=args.fault_budget)
        model.fail_next("embeddings", 500, count=args.fault_budget)
        down_at = time.monotonic()
        sent_before = len(producer.snapshot())
        peak_owner = peak_held = peak_total = 0
        samples = 0
        while time.monotonic() - down_at < args.outage_seconds and deadline.left() > 60:
            waiting, running = extraction_per_owner(stack.redis)
            samples += 1
            peak_owner = max(peak_owner, max(waiting.values(), default=0))
            peak_held = max(peak_held, max((waiting + running).values(), default=0))
            peak_total = max(peak_total, sum(waiting.values()) + sum(running.values()))
            time.sleep(min(args.sample_seconds, max(0.0, args.outage_seconds - (time.monotonic() - down_at))))
        outage_s = time.monotonic() - down_at
        calls = model.requests[calls_before:]
        by_route = collections.Counter(r.route for r in calls)
        model.reset()  # the model is back: faults cleared
        model.set_chat_handler(echo_facts_handler)
        back = time.monotonic()
        dead_at_return = stack.dead_letters()
        snapshot = producer.snapshot()
        at_return = ledger(stack.pg_url)
        pending_at_return = sum(1 for k in snapshot if at_return.get(k, "pending") == "pending")
        print(
            f"outage {outage_s:.0f} s: {len(snapshot) - sent_before} sources sent during it; "
            f"{len(calls)} model calls ({by_route.get('chat', 0)} chat, {by_route.get('embeddings', 0)} "
            f"embeddings), {len(calls) / outage_s:.2f} calls/s; most extraction messages waiting for one owner "
            f"{peak_owner} (with those running {peak_held}; all owners {peak_total}, "
            f"{samples} samples every {args.sample_seconds:g} s); "
            f"at the model's return: {pending_at_return} sources not final, {dead_at_return} dead letters",
            flush=True,
        )
        final, states = wait_final(stack.pg_url, snapshot, deadline.left(args.final_timeout), poll_s=0.5)
        recovered_s = time.monotonic() - back
        print(
            f"every source sent by the model's return final: {'yes' if final else 'NO'}, "
            f"{recovered_s:.1f} s after it; states {states}",
            flush=True,
        )
        producer.stopping.set()
        producer.join(10)
        sent = producer.snapshot()
        final_all, states_all = wait_final(stack.pg_url, sent, deadline.left(min(120, args.final_timeout)), poll_s=0.5)
        found = ledger(stack.pg_url)
        counts = committed(stack.pg_url)
        not_once = [k for k in sent if found.get(k) != "learned" or counts[k] != 1]
        dead = stack.dead_letters()
        print(
            f"sent {len(sent)} (producer failures {producer.failures}); all final: {'yes' if final_all else 'NO'}, "
            f"states {states_all}; dead letters {dead}",
            flush=True,
        )
        verdict(dead == 0, "no dead letter from a model outage", f"{dead} dead letters {stack.dead_by_queue()}")
        verdict(final, "every source final once the model is back", f"{recovered_s:.0f} s; states {states}")
        verdict(
            not not_once,
            "every source learned exactly once",
            f"{len(not_once)} of {len(sent)} not (states "
            f"{dict(collections.Counter(found.get(k, 'missing') for k in not_once))}, committed attempts "
            f"{dict(collections.Counter(counts[k] for k in not_once))})",
        )
    finally:
        if producer is not None:
            producer.stopping.set()
        stack.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--backlog", action="store_true", help="run the backlog part")
    parser.add_argument("--outage", action="store_true", help="run the model-outage part")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--owners", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=16, help="threads queuing the backlog")
    parser.add_argument("--forgets", type=int, default=200, help="forgets of queued sources per door")
    parser.add_argument("--cli-forgets", type=int, default=5, help="real `memjobs forget` commands")
    parser.add_argument("--calls", type=int, default=20, help="status, /readyz and /console calls each")
    parser.add_argument("--outage-seconds", type=float, default=600)
    parser.add_argument("--steady-seconds", type=float, default=15)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--load-owners", type=int, default=50)
    parser.add_argument("--sample-seconds", type=float, default=3.0)
    parser.add_argument(
        "--fault-budget", type=int, default=50_000, help="500s queued per route (more than an outage uses)"
    )
    parser.add_argument("--max-retries", type=int, default=None, help="MEMJOBS_MAX_RETRIES for the workers")
    parser.add_argument("--final-timeout", type=float, default=1800, help="bound on each wait for final")
    parser.add_argument("--timeout", type=float, default=3600, help="bound on the whole run, seconds")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args()
    if not (args.backlog or args.outage):
        parser.error("choose --backlog and/or --outage")
    deadline = Deadline(args.timeout)

    def out_of_time(_sig: int, _frame: Any) -> None:
        raise TimeoutError(f"--timeout {args.timeout:g} s reached")

    signal.signal(signal.SIGALRM, out_of_time)
    signal.alarm(int(args.timeout) + 60)  # a backstop: the waits above already stop short of it
    print(f"memjobs scale bench, {os.cpu_count()} CPUs, started {time.strftime('%H:%M:%S')}", flush=True)
    if args.backlog:
        backlog(args, deadline)
    if args.outage:
        outage(args, deadline)
    signal.alarm(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
