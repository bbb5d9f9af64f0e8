"""A model outage under steady load, with the default timings (issue 30, item 2).

Starts its own Redis and PostgreSQL (embedded, in a scratch directory), the
stand-in model server (``tests/support/openai_server.py``), ``memjobs worker``
with the default settings (the hashed embedder) and ``memjobs sweep``, and a
producer remembering ``--rate`` sources a second across ``--owners`` owners
throughout. After a steady start, every chat call answers 500 for
``--outage`` seconds; then the model answers again. Measured: the chat calls
the stand-in received during the outage, the most extraction messages held in
Redis at once (and per owner, by message id), dead letters, and how long after
the model returned every source sent was final::

    .venv/bin/python bench/bench_model_outage.py [--outage 120] [--rate 2] [--max-retries 1]

Prints one summary line; the figures are in docs/operations.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import redis  # noqa: E402
from dramatiq import Message  # noqa: E402
from dramatiq.common import dq_name  # noqa: E402

from memjobs_client import keys  # noqa: E402
from memjobs_client.contracts import ACTOR_EXTRACT, QUEUE_OF, QUEUES  # noqa: E402
from memjobs_worker.embedded import EmbeddedPostgres, EmbeddedRedis  # noqa: E402
from tests.support.openai_server import FakeOpenAI, echo_facts_handler  # noqa: E402
from tests.support.redis_values import as_bytes  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from bench_pg_outage import Producer, all_final, ledger  # noqa: E402  (one producer, one ledger read)

EXTRACT = QUEUE_OF[ACTOR_EXTRACT]


def extractions(client: redis.Redis) -> Counter[str]:
    """Extraction messages in Redis (ready, delayed, in flight), by owner, by message id."""
    owners: dict[str, str] = {}
    for queue in (EXTRACT, dq_name(EXTRACT)):
        for raw in client.hvals(keys.messages(queue)):
            message = Message.decode(as_bytes(raw))
            owners[message.message_id] = message.args[0]["owner_key"]
    return Counter(owners.values())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--outage", type=float, default=120.0)
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument("--owners", type=int, default=20)
    parser.add_argument("--max-retries", type=int, default=None)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="memjobs-bench-modeloutage-"))
    base.chmod(0o755)
    rds = EmbeddedRedis(base / "redis")
    pg = EmbeddedPostgres(base / "pg")
    procs: list[subprocess.Popen[bytes]] = []
    with FakeOpenAI(embedding_dims=64) as model:
        model.set_chat_handler(echo_facts_handler)
        try:
            redis_url, pg_url = rds.start(), pg.start()
            env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMJOBS_", "QWEN_", "DASHSCOPE"))}
            env.update(
                PYTHONPATH=str(REPO),
                MEMJOBS_REDIS_URL=redis_url,
                MEMJOBS_DATABASE_URL=pg_url,
                MEMJOBS_DATA_DIR=str(base / "data"),
                MEMJOBS_LOCAL_EMBEDDER="hashing",
                MEMJOBS_METRICS="off",
                MEMJOBS_KNOWLEDGE="off",
                MEM0_TELEMETRY="False",
                QWEN_AUDIO_MEMORY_BASE_URL=model.base_url,
                QWEN_AUDIO_MEMORY_API_KEY="bench",
                QWEN_AUDIO_MEMORY_MODEL="fake-flash",
            )
            if args.max_retries is not None:
                env["MEMJOBS_MAX_RETRIES"] = str(args.max_retries)
            log = open(base / "workers.log", "ab")  # noqa: SIM115 - for the run's lifetime
            for command in (["worker"], ["sweep", "--every", "5"]):
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "memjobs_worker.cli.main", *command],
                        env=env,
                        cwd=REPO,
                        stdout=log,
                        stderr=log,
                        start_new_session=True,
                    )
                )
            client = redis.Redis.from_url(redis_url)
            producer = Producer(redis_url, args.owners, args.rate, "I like the colour number {i}")
            producer.start()
            time.sleep(10)
            first = producer.snapshot()
            deadline = time.monotonic() + 180
            while not all_final(pg_url, first):
                if time.monotonic() > deadline:
                    raise SystemExit(f"workers never caught up; see {base / 'workers.log'}")
                time.sleep(0.5)

            model.fail_next("chat", 500, count=10_000_000)
            down = time.monotonic()
            most, most_per_owner = 0, 0
            while time.monotonic() - down < args.outage:
                held = extractions(client)
                most = max(most, sum(held.values()))
                most_per_owner = max(most_per_owner, max(held.values(), default=0))
                time.sleep(0.5)
            model.clear_faults("chat")
            back = time.monotonic()
            calls = sum(1 for r in model.requests_for("chat") if down <= r.received_at < back)
            snapshot = producer.snapshot()
            while not all_final(pg_url, snapshot):
                if time.monotonic() - back > 600:
                    raise SystemExit(f"not final 600 s after the model returned; see {base / 'workers.log'}")
                time.sleep(0.2)
            final_s = time.monotonic() - back
            producer.stopping.set()
            producer.join()
            deadline = time.monotonic() + 120  # the last few sent after the model returned
            while not all_final(pg_url, producer.sent) and time.monotonic() < deadline:
                time.sleep(0.5)
            dead = sum(int(client.zcard(keys.dead_letters(q))) for q in QUEUES)
            states = Counter((ledger(pg_url) or {}).get(s, "missing") for s in producer.sent)
            print(
                f"outage {args.outage:g} s, {args.owners} owners at {args.rate:g} sources/s, "
                f"max_retries {args.max_retries if args.max_retries is not None else 'default'}: "
                f"{calls} chat calls during it ({calls / args.outage:.2f}/s); at most {most} extraction "
                f"messages in Redis, {most_per_owner} per owner; dead letters {dead}; every source final "
                f"{final_s:.1f} s after the model returned; sources {dict(states)}"
            )
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)
            pg.stop()
            rds.stop()
            if os.environ.get("KEEP"):
                print(base)
            else:
                shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
