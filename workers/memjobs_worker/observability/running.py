"""What each worker process is running now, for the console.

:class:`TrackRunning` (a Dramatiq middleware) keeps the jobs its process's
worker threads run in memory, and a thread of its own publishes them every
:data:`PUBLISH_MS` into the process's hash :func:`memjobs_client.keys.running`
(``<host>:<pid>``), replaced whole, and only when it changed: a job costs no
Redis round trip, and one shorter than the period may never be shown (the
console lists what runs long enough to look at). The hash expires with the
process's heartbeat (:mod:`~.heartbeat` renews both), so a killed process's
jobs vanish within the heartbeat's TTL. A field is the
message id; its value the actor, the queue, when it started (epoch ms) and the
owner key's first characters: never the payload or the owner id.

:func:`running_jobs` reads every process's hash (one SCAN, one pipelined
HGETALL per process: a few dozen fields at most, a thread each).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass

import dramatiq
import redis
from dramatiq.broker import MessageProxy

from memjobs_client import keys
from memjobs_client.redis_seam import as_str, redis_best_effort
from memjobs_worker.observability.message import OnJobEnd, message_owner
from memjobs_worker.observability.ticker import Ticker

log = logging.getLogger(__name__)

#: Characters of the owner key recorded (as the dead-letter listings show).
OWNER_PREFIX_CHARS = 12

#: How often a process publishes the jobs it runs (when they changed).
PUBLISH_MS = 1_000


@dataclass(frozen=True)
class RunningJob:
    host: str
    pid: str
    message_id: str
    actor: str
    queue: str
    started_ms: int
    owner: str | None

    def elapsed_s(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.started_ms / 1000)


class TrackRunning(OnJobEnd):
    """Records the jobs this process runs (see the module).

    Parameters:
        client: the broker's Redis.
        ttl_ms: the hash's TTL, renewed by each publication and each heartbeat.
        publish_ms: how often the jobs running are published (when they changed).
    """

    def __init__(self, client: redis.Redis, *, ttl_ms: int, publish_ms: int = PUBLISH_MS) -> None:
        self.client = client
        self.ttl_ms = ttl_ms
        self.publish_ms = publish_ms
        self.key = keys.running(socket.gethostname(), os.getpid())
        self._jobs: dict[str, str] = {}  # message id -> the field's value
        self._changed = False
        self._lock = threading.Lock()
        self._publisher = Ticker("running-jobs", self.publish, lambda: self.publish_ms / 1000)

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self.key = keys.running(socket.gethostname(), os.getpid())  # a forked child's own
        self._publisher.start()

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        owner = message_owner(message)
        value = json.dumps(
            {
                "actor": message.actor_name if message.actor_name in broker.actors else "unknown",
                "queue": message.queue_name,
                "started_ms": int(time.time() * 1000),
                "owner": owner[:OWNER_PREFIX_CHARS] if owner is not None else None,
            }
        )
        with self._lock:
            self._jobs[message.message_id] = value
            self._changed = True

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._publisher.stop()
        with redis_best_effort():  # it expires by itself
            self.client.delete(self.key)

    def job_ended(self, message: MessageProxy) -> None:
        with self._lock:
            if self._jobs.pop(message.message_id, None) is not None:
                self._changed = True

    def publish(self) -> None:
        """Replace the process's hash with the jobs running now, if they changed
        since the last publication (one pipelined round trip)."""
        with self._lock:
            if not self._changed:
                return
            jobs, self._changed = dict(self._jobs), False
        with redis_best_effort() as attempt, self.client.pipeline(transaction=True) as pipe:
            pipe.delete(self.key)
            for message_id, value in jobs.items():
                pipe.hset(self.key, message_id, value)
            if jobs:
                pipe.pexpire(self.key, self.ttl_ms)
            pipe.execute()
        if attempt.failed:
            log.warning("running jobs not published: Redis did not answer (tried again next period)")
            with self._lock:
                self._changed = True


def running_jobs(client: redis.Redis) -> list[RunningJob]:
    """Every job a live worker process is running, the longest-running first.

    Raises:
        redis.RedisError: Redis did not answer.
    """
    names = sorted(as_str(k) for k in client.scan_iter(match=f"{keys.RUNNING_PREFIX}*", count=500))
    if not names:
        return []
    with client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.hgetall(name)
        hashes = pipe.execute()
    out = []
    for name, fields in zip(names, hashes, strict=True):
        host, _, pid = name.removeprefix(keys.RUNNING_PREFIX).rpartition(":")
        for raw_id, raw in fields.items():
            try:
                job = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(job, dict):
                continue
            owner = job.get("owner")
            out.append(
                RunningJob(
                    host,
                    pid,
                    as_str(raw_id),
                    str(job.get("actor", "?")),
                    str(job.get("queue", "?")),
                    int(job.get("started_ms") or 0),
                    owner if isinstance(owner, str) else None,
                )
            )
    return sorted(out, key=lambda j: j.started_ms)
