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
import sys
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
from tests.support.bench_env import Scratch  # noqa: E402
from tests.support.openai_server import echo_facts_handler  # noqa: E402
from tests.support.redis_values import as_bytes  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from bench_pg_outage import Producer, all_final, final_after, ledger  # noqa: E402  (one producer, one ledger read)

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
    with Scratch("modeloutage") as scratch:
        base = scratch.dir
        redis_url, pg_url = scratch.redis().url, scratch.postgres().url
        model = scratch.model(embedding_dims=64)
        model.set_chat_handler(echo_facts_handler)
        env = scratch.env(
            redis_url,
            pg_url,
            QWEN_AUDIO_MEMORY_BASE_URL=model.base_url,
            QWEN_AUDIO_MEMORY_API_KEY="bench",
            QWEN_AUDIO_MEMORY_MODEL="fake-flash",
        )
        if args.max_retries is not None:
            env["MEMJOBS_MAX_RETRIES"] = str(args.max_retries)
        scratch.memjobs(env, "worker")
        scratch.memjobs(env, "sweep", "--every", "5")
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
        final_s = final_after(pg_url, producer.snapshot(), back, f"the model returned; see {base / 'workers.log'}")
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


if __name__ == "__main__":
    main()
