"""Operator views read straight from Redis and the ledger: queue depths, live
workers, recent throughput, draining, health."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis

from memjobs_client import keys
from memjobs_client.contracts import ACTOR_EXTRACT, QUEUE_OF, QUEUES
from memjobs_client.errors import MemjobsError
from memjobs_client.redis_seam import as_str, redis_best_effort, redis_errors
from memjobs_worker.memory.store.base import StateStore
from memjobs_worker.model_breaker import BreakerState, read_states
from memjobs_worker.observability import jobstats
from memjobs_worker.observability.heartbeat import live_heartbeats

#: The windows ``memjobs status`` reports throughput over, in minutes.
RECENT_WINDOWS_MIN = (5, 15)


def queue_stats(client: redis.Redis) -> dict[str, dict[str, int]]:
    """Per queue: ready (waiting), delayed, in_flight (fetched, not acked), dead."""
    with redis_errors():
        ack_sets = list(client.scan_iter(match=keys.ACKS_PATTERN, count=500))
        pipe = client.pipeline(transaction=False)
        for queue in QUEUES:
            pipe.llen(keys.queue(queue))
            pipe.llen(keys.delay_queue(queue))
            pipe.zcard(keys.dead_letters(queue))
        for key in ack_sets:
            pipe.scard(key)
        values = pipe.execute()
    stats: dict[str, dict[str, int]] = {}
    for i, queue in enumerate(QUEUES):
        ready, delayed, dead = values[3 * i : 3 * i + 3]
        stats[queue] = {"ready": int(ready), "delayed": int(delayed), "in_flight": 0, "dead": int(dead)}
    for key, count in zip(ack_sets, values[3 * len(QUEUES) :], strict=True):
        name = as_str(key)
        acked = keys.acked_queue(name, QUEUES)
        if acked is not None:
            stats[acked]["in_flight"] += int(count)
    return stats


def live_workers(client: redis.Redis) -> int:
    """Worker processes whose heartbeat key has not expired."""
    with redis_errors():
        return len(live_heartbeats(client))


def model_breakers(client: redis.Redis) -> list[BreakerState]:
    """Each model service's circuit breaker (:mod:`memjobs_worker.model_breaker`).

    Raises:
        BackendUnavailable: Redis did not answer.
    """
    with redis_errors():
        return read_states(client)


def status(client: redis.Redis, store: StateStore) -> dict[str, Any]:
    queues = queue_stats(client)
    states = store.counts_by_state()
    return {
        "queues": queues,
        "pending_sources": states["pending"],
        "sources": states,
        "workers": live_workers(client),
        "model_breakers": {
            b.service: {
                "state": b.state,
                "failures": b.failures,
                "open_for_s": None if b.open_for_s is None else round(b.open_for_s, 1),
            }
            for b in model_breakers(client)
        },
        "recent": {f"last_{m}_min": jobstats.recent(client, m) for m in RECENT_WINDOWS_MIN},
    }


def check(client: redis.Redis, store: StateStore | Callable[[], StateStore]) -> str | None:
    """Health for container checks: None when healthy, else one line saying why.

    ``store`` may be given as the call that opens it: opening the ledger
    connects (and migrates), which is what is checked.
    """
    with redis_best_effort() as attempt:
        client.ping()
    if attempt.failed:
        return f"Redis does not answer: {type(attempt.error).__name__}"
    try:
        (store() if callable(store) else store).ping()
    except MemjobsError as exc:
        return f"the state database (PostgreSQL) is unreachable: {exc}"
    workers = live_workers(client)
    if workers == 0:
        return "no live worker: no heartbeat key in Redis"
    return None


def is_drained(client: redis.Redis, store: StateStore) -> bool:
    """The work is done: nothing pending in the ledger, and no message that could
    still change something — every queue empty (ready, delayed, in flight)
    except the extraction queue. With nothing pending an ``extract_facts``
    has nothing to do, so its leftovers (retries waiting out a backoff,
    deliveries held by a dead consumer until they are requeued, duplicate
    nudges) do not keep a drain waiting minutes after the last source is final."""
    queues = queue_stats(client)
    busy = any(
        q["ready"] or q["delayed"] or q["in_flight"] for name, q in queues.items() if name != QUEUE_OF[ACTOR_EXTRACT]
    )
    return not busy and store.counts_by_state()["pending"] == 0


def drain(client: redis.Redis, store: StateStore, timeout_s: float, poll_s: float = 0.1) -> bool:
    """Wait until :func:`is_drained` holds twice in a row; False on timeout."""
    deadline = time.monotonic() + timeout_s
    streak = 0
    while time.monotonic() < deadline:
        streak = streak + 1 if is_drained(client, store) else 0
        if streak >= 2:
            return True
        time.sleep(poll_s)
    return False
