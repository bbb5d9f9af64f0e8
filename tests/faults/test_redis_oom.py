"""Redis at its memory limit (``maxmemory``, ``noeviction``), on a Redis of the test's own.

Producers stop at the high-water mark (``MEMJOBS_REDIS_HIGH_WATER``) with
``RedisFull`` (HTTP 503 ``redis_full`` with ``Retry-After``, the CLI's exit 5),
and Redis's own refusal at ``maxmemory`` is the same error. The workers keep
fetching, acknowledging and retrying even when Redis is over its limit (the
allow-oom dispatch of ``memjobs_worker.broker``): nothing accepted is lost or
dead-lettered, and everything accepted is learned once memory frees.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from memjobs_client.connect import MemoryGuard
from memjobs_client.contracts import QUEUES, owner_key
from memjobs_client.errors import RedisFull
from memjobs_worker.cli import exits
from memjobs_worker.embedded import EmbeddedRedis
from memjobs_worker.runtime import producer_client
from memjobs_worker.settings import Settings
from tests.support.cli import cli_env, run_cli
from tests.support.harness import Harness
from tests.support.http import problem
from tests.support.polling import wait_for

OWNERS = [f"oom-owner-{i}" for i in range(5)]
#: Sources of some 2 KB: the last 100 KB before a mark take about fifty.
_PAD = " and the lamp by the window" * 75
_texts = (f"fact {i}: the blue box {i} is on shelf {i % 9}{_PAD}" for i in itertools.count())


def used(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


BALLAST = "oom-test:ballast:"


def ballast(r: redis.Redis, until: int) -> None:
    """Keys that are no job's, until Redis uses about ``until`` bytes (many small
    ones: a command's own bytes count against maxmemory while Redis reads it, and
    a growing string reserves up to a megabyte ahead)."""
    while (short := until - used(r)) > 0:
        r.set(f"{BALLAST}{r.incr('oom-test:n')}", b"\0" * min(short, 16_000))


def free_ballast(r: redis.Redis) -> None:
    for key in list(r.scan_iter(match=f"{BALLAST}*", count=1000)):
        r.delete(key)


def fill(remember: Callable[[str, str], str], accepted: dict[str, str], limit: int = 5000) -> RedisFull:
    """Remember until refused; the accepted source ids (by owner) go to ``accepted``."""
    for i in range(limit):
        owner = OWNERS[i % len(OWNERS)]
        try:
            accepted[remember(owner, next(_texts))] = owner
        except RedisFull as exc:
            return exc
    raise AssertionError(f"{limit} sources were accepted and none refused")


def queued(h: Harness) -> int:
    return sum(q["ready"] + q["delayed"] + q["in_flight"] for q in h.queues().values())


def dead(h: Harness) -> int:
    return sum(q["dead"] for q in h.queues().values())


def states(h: Harness, accepted: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for owner in OWNERS:
        out.update({r.source_id: r.state for r in h.store.list_sources(owner_key(owner))})
    return {sid: out.get(sid, "missing") for sid in accepted}


def test_full_redis_refuses_new_jobs_clearly_loses_nothing_and_resumes(
    own_redis: EmbeddedRedis,
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    api_factory: Callable[..., Any],
    tmp_path: Path,
) -> None:
    # Retried while Redis is full, never dead-lettered within the test's few seconds of it.
    settings = make_settings(redis_url=own_redis.url, api_port=0, max_retries=1000)
    h = harness_factory(settings)
    r = redis.Redis.from_url(own_redis.url)
    guarded = producer_client(
        settings.redis, settings.memory, settings.sessions, settings.knowledge, redis_url=own_redis.url
    )
    guarded.memory_guard = MemoryGuard(settings.redis.high_water, refresh_s=0)  # read memory on every call
    api = api_factory(worker=False, settings=settings)
    accepted: dict[str, str] = {}
    # Warm: Redis's first job and first fetch allocate some 200 KB once (scripts, tables).
    h.start_worker()
    accepted[guarded.remember(OWNERS[0], next(_texts))] = OWNERS[0]
    h.drain(30)
    h.stop_worker()
    limit = used(r) + 8_000_000
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", limit)
    # Most of the memory goes to something else (ballast), the last 100 KB before the mark to jobs.
    ballast(r, int(limit * settings.redis.high_water) - 100_000)

    # 1. At the high-water mark a producer is refused clearly, and nothing of the refused call is queued.
    refusal = fill(guarded.remember, accepted)
    assert refusal.reason == "redis_full" and "Redis is full" in str(refusal), refusal
    assert "new jobs stop at 90%" in str(refusal)  # the producers' mark, not Redis's own limit
    assert queued(h) == len(accepted) - 1  # all but the warm-up's
    ballast(r, int(limit * settings.redis.high_water) + 500_000)  # clearly over, for the other doors
    response = api.post("/v1/remember", {"owner_id": OWNERS[0], "text": "refused at the door"})
    problem(response, "redis_full", 503)
    assert int(response.headers["Retry-After"]) > 0
    cli = run_cli(
        cli_env(tmp_path / "cli", MEMJOBS_REDIS_URL=own_redis.url, MEMJOBS_DATABASE_URL=settings.database.url or ""),
        "remember",
        "--owner",
        OWNERS[0],
        "--text",
        "refused on the command line",
    )
    assert cli.code == exits.UNAVAILABLE and "Redis is full" in cli.stderr, str(cli)
    assert queued(h) == len(accepted) - 1

    # 2. Workers drain in the headroom while producers are refused; then producers are taken again.
    h.start_worker()
    h.drain(60)
    assert set(states(h, accepted).values()) == {"learned"}
    free_ballast(r)  # the other doors' margin over the mark
    ballast(r, int(limit * settings.redis.high_water) - 300_000)
    accepted[guarded.remember(OWNERS[1], next(_texts))] = OWNERS[1]
    h.stop_worker()

    # 3. A producer that ignores the mark meets Redis's own refusal: the same error.
    ballast(r, limit - 100_000)
    raw = producer_client(
        settings.redis, settings.memory, settings.sessions, settings.knowledge, redis_url=own_redis.url
    )
    raw.memory_guard = MemoryGuard(1.0)
    refusal = fill(raw.remember, accepted)
    assert refusal.reason == "redis_full" and "maxmemory reached" in str(refusal), refusal  # Redis's own
    assert queued(h) > 0

    # 4. Workers at a Redis over its limit still fetch, acknowledge and retry (allow-oom):
    #    every accepted source reaches the ledger, no message is lost or dead-lettered.
    h.start_worker()
    wait_for(
        lambda: "missing" not in states(h, accepted).values(),
        60,
        "every accepted source in the ledger while Redis is full",
    )
    assert dead(h) == 0  # their follow-ups wait for memory: retried, not dead-lettered

    # 5. Memory frees: everything accepted is learned, exactly the accepted sources, nothing dead.
    #    A remember that wrote the ledger but could not queue its extraction (Redis full) is
    #    retried and finds its source there: the sweeper (every few seconds in production)
    #    schedules the owner's pending sources.
    free_ballast(r)

    def all_learned() -> bool:
        h.runtime.sweeper.once()
        return queued(h) == 0 and set(states(h, accepted).values()) == {"learned"}

    wait_for(all_learned, 90, "everything accepted to be learned once Redis has room", poll_s=0.5)
    assert dead(h) == 0 and {q: h.queues()[q]["dead"] for q in QUEUES} == dict.fromkeys(QUEUES, 0)
    guarded.remember(OWNERS[2], next(_texts))  # producers are taken again
