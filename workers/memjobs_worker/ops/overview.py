"""One read of everything the console shows: queues, the model services'
circuit breakers, worker hosts and pools
with their heartbeat age, sources by state, recent outcomes, failure reasons
and the dead letters. No owner id and no text: queue, actor and pool names,
counts, reasons (identifiers) and owner-key prefixes only.

The jobs retrying come from the record the workers keep
(:mod:`memjobs_worker.observability.retrying`): a count and the newest
:data:`~memjobs_worker.observability.retrying.SHOWN`, never a read of the
queued messages, so the page costs the same at any backlog.
"""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from dataclasses import dataclass, field

import redis

from memjobs_client.contracts import CHEAP_QUEUES, MODEL_QUEUES
from memjobs_client.redis_seam import redis_errors
from memjobs_worker.memory.store.base import StateStore
from memjobs_worker.model_breaker import BreakerState, read_states
from memjobs_worker.observability import jobstats
from memjobs_worker.observability.heartbeat import PREFIX, live_heartbeats
from memjobs_worker.observability.retrying import RetryingRecord
from memjobs_worker.ops.deadletters import DeadLetter, DeadLetters
from memjobs_worker.ops.status import queue_stats

#: The window of "recent outcomes", in minutes.
RECENT_MIN = 15
#: Dead letters shown on the page (the rest are counted).
SHOWN_LETTERS = 50


@dataclass(frozen=True)
class Process:
    host: str
    pid: str
    pool: str
    age_s: float | None


@dataclass
class Overview:
    queues: dict[str, dict[str, int]]
    processes: list[Process]
    sources: dict[str, int] | None  # None: the state store did not answer
    recent: dict[str, dict[str, int]]
    failures: list[tuple[str, str, str, int]]  # (where, actor, reason, count)
    dead_letters: list[DeadLetter]
    dead_total: int
    retrying_total: int = 0  # the failures table counts the newest retrying jobs only
    retrying_shown: int = 0
    breakers: list[BreakerState] = field(default_factory=list)
    read_at: float = field(default_factory=time.time)

    @property
    def hosts(self) -> dict[str, list[Process]]:
        out: dict[str, list[Process]] = {}
        for p in self.processes:
            out.setdefault(p.host, []).append(p)
        return out


def pool_of(queues: list[str]) -> str:
    """The pool a process belongs to, by the queues it consumes."""
    if not queues:
        return "?"
    if set(queues) <= set(CHEAP_QUEUES):
        return "fast"
    if set(queues) <= set(MODEL_QUEUES):
        return "model"
    return "all queues"


def processes(client: redis.Redis, now: float | None = None) -> list[Process]:
    """Every worker process with a live heartbeat key: host, pid, pool, heartbeat age."""
    names = live_heartbeats(client)
    values = client.mget(names) if names else []
    out = []
    for name, raw in zip(names, values, strict=True):
        host, _, pid = name.removeprefix(PREFIX).rpartition(":")
        try:
            beat = json.loads(raw) if raw else {}
        except ValueError:
            beat = {}
        at = beat.get("at") if isinstance(beat, dict) else None
        queues = beat.get("queues") if isinstance(beat, dict) else None
        age = max(0.0, (now or time.time()) - float(at)) if isinstance(at, int | float) else None
        out.append(Process(host or socket.gethostname(), pid, pool_of(list(queues or [])), age))
    return out


def read(client: redis.Redis, store: StateStore, *, stale_after_ms: int) -> Overview:
    """Everything at once (Redis must answer; the state store may not).
    ``stale_after_ms``: retrying jobs that last failed longer ago are taken for
    left behind (:func:`memjobs_worker.observability.retrying.stale_after_ms`).

    Raises:
        BackendUnavailable: Redis did not answer.
    """
    letters = DeadLetters(client)
    with redis_errors():
        queues = queue_stats(client)
        found = letters.letters()
        recent = jobstats.recent(client, RECENT_MIN)
        procs = processes(client)
        retrying = RetryingRecord(client).read(stale_after_ms=stale_after_ms)
        breakers = read_states(client)
    try:
        sources: dict[str, int] | None = store.counts_by_state()
    except Exception:  # noqa: BLE001 - the page still shows the queues
        sources = None
    failures: Counter[tuple[str, str, str]] = Counter()
    for job in retrying.newest:
        failures[("retrying", job.actor, job.reason)] += 1
    for letter in found:
        failures[("dead", letter.actor, letter.reason)] += 1
    return Overview(
        queues=queues,
        processes=procs,
        sources=sources,
        recent=recent,
        failures=[(w, a, r, n) for (w, a, r), n in failures.most_common()],
        dead_letters=found[:SHOWN_LETTERS],
        dead_total=len(found),
        breakers=breakers,
        retrying_total=retrying.total,
        retrying_shown=len(retrying.newest),
    )
