"""Worker heartbeats: each worker process keeps a key with a TTL alive in Redis.

``memjobs check`` (a container health check) and ``memjobs status`` count the
live keys; a killed process stops renewing and its key expires within the TTL.
The key names the host and the pid, never anything about users.

The same thread also refreshes this process's entry in Dramatiq's own
heartbeat set (``memjobs:__heartbeats__``), which Dramatiq otherwise updates
only when a consumer talks to Redis: a process whose every consumer is full
and whose threads are all in long jobs would look dead after the broker's
heartbeat timeout and have its messages requeued while it still works on
them. With the beat here, only a process that is gone (or stopped as a whole)
stops beating; a process paused longer than the timeout is treated as dead,
and its commits are refused by the fence when it resumes.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time

import dramatiq
import redis
from dramatiq.middleware import Middleware

from memjobs_client import keys
from memjobs_client.redis_seam import as_str, redis_best_effort
from memjobs_worker.observability.ticker import Ticker

log = logging.getLogger(__name__)
PREFIX = keys.HEARTBEAT_PREFIX


def heartbeat_key(host: str, pid: int) -> str:
    return f"{PREFIX}{host}:{pid}"


class Heartbeat(Middleware):
    """Renews ``memjobs:heartbeat:<host>:<pid>`` every ``interval_ms`` with a ``ttl_ms`` TTL."""

    def __init__(self, client: redis.Redis, *, interval_ms: int, ttl_ms: int) -> None:
        self.client = client
        self.interval_ms = interval_ms
        self.ttl_ms = ttl_ms
        self._beater = Ticker("heartbeat", self._beat, lambda: self.interval_ms / 1000)
        self.key = ""
        self.running_key = ""  # the jobs it runs (observability/running.py): renewed with it
        self.broker_beat: tuple[str, str] | None = None
        self.queues: list[str] = []  # what this process consumes: names its pool on the console

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self.key = heartbeat_key(socket.gethostname(), os.getpid())
        self.running_key = keys.running(socket.gethostname(), os.getpid())
        consumed = getattr(worker, "consumer_whitelist", None) or broker.get_declared_queues()
        self.queues = sorted(q for q in consumed if not q.endswith(".DQ"))
        broker_id = getattr(broker, "broker_id", None)
        namespace = getattr(broker, "namespace", None)
        if broker_id and namespace:
            self.broker_beat = (f"{namespace}:__heartbeats__", str(broker_id))
        self._beat()
        self._beater.start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._beater.stop()
        with redis_best_effort():  # it expires by itself
            self.client.delete(self.key)

    def _beat(self) -> None:
        with redis_best_effort() as attempt:
            pipe = self.client.pipeline(transaction=False)
            pipe.set(
                self.key, json.dumps({"pid": os.getpid(), "at": time.time(), "queues": self.queues}), px=self.ttl_ms
            )
            pipe.pexpire(self.running_key, self.ttl_ms)
            if self.broker_beat is not None:
                zset, broker_id = self.broker_beat
                pipe.zadd(zset, {broker_id: int(time.time() * 1000)})
            pipe.execute()
        if attempt.failed:
            log.warning("heartbeat not written: Redis did not answer")


def live_heartbeats(client: redis.Redis) -> list[str]:
    """Keys of worker processes whose heartbeat has not expired."""
    return sorted(as_str(k) for k in client.scan_iter(match=f"{PREFIX}*", count=500))
