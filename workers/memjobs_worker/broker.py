"""The Dramatiq broker on Redis, with memjobs' middleware and every queue declared.

Two more things Dramatiq's broker does not do:

- A full Redis (``maxmemory``, ``noeviction``) refuses every command that may
  grow memory, and Dramatiq's one dispatch script starts with one (the
  consumer's heartbeat, a ZADD): a worker could then neither fetch nor
  acknowledge, and a full Redis would stay full. Here the commands that take,
  acknowledge, dead-letter or put back a message already in Redis (and a retry:
  the message in hand, requeued) run the same script flagged ``allow-oom``
  (Redis ≥ 7), so the workers drain a full Redis; new jobs stay refused.
- A message of a newer schema version than this worker reads
  (:class:`DeferNewerSchema`) is left for a newer worker during a rolling
  upgrade: requeued with a delay and counted, not dead-lettered.

Dramatiq's Redis consumer raises on a message it cannot decode (bytes pushed
into a queue by hand, a foreign encoder): the consumer thread restarts, and the
messages it had prefetched stay unacknowledged until the worker dies. Here such
a message is found among this consumer's unacknowledged ids and moved to the
dead-letter queue, once, and consumption goes on.

The same holds for a lost connection (a Redis restart, a Sentinel failover):
Dramatiq's consumer thread drops its delayed messages (an extraction waiting
out its debounce, a retry waiting out its backoff) and its prefetched ones,
while their ids stay in this live worker's unacknowledged set, which only a
*dead* worker's maintenance puts back: a worker that never restarts would hold
them for ever (and the owner's "extraction queued" flag would keep the sweeper
away until it expires). Here a consumer, before its first fetch and every
:data:`AUDIT_EVERY_S`, puts back what its worker no longer holds
(:meth:`_Consumer._put_back_stranded`): this worker's unacknowledged ids for
the queue that are neither prefetched, nor with a worker thread, nor in the
consumer thread's delay queue. And a worker thread whose retry Redis does not
take (the job failed on the outage itself) tries again until Redis does
(:meth:`MemjobsRedisBroker.enqueue`), as Dramatiq does its acknowledgement:
Dramatiq would log the failure and acknowledge the delivery, and the job
would be gone.

A queue an operator paused (:mod:`memjobs_worker.ops.pauses`) is not fetched
from: its consumers put back what they had prefetched and idle until it is
resumed; what already reached a worker thread goes back through
:class:`~memjobs_worker.ops.pauses.HonourPauses`, first in the middleware.

And this module is the one place that reads Dramatiq's stored messages (the
hashes ``<namespace>:<queue>.msgs``, their delay queues' and dead letters'),
for operators only: the console's job lists and a job's page
(:func:`page_messages`, :func:`find_message`: a page at a time, at most
:data:`PAGE_BUDGET` messages read, never a whole queue), whether an owner
still has work queued (:func:`owner_has_messages`, ``memjobs demo``, a bounded
scan of :data:`SCAN_LIMIT` messages per hash), and an owner's erasure, which
drops every message naming the owner, queued, delayed or dead-lettered
(:func:`drop_owner_messages`), while :class:`~memjobs_worker.erased.DropErasedOwners`
has the workers drop the owner's jobs instead of running them. No job or API
request path reads them: a forget decides on the owner's queued-remember count
(:mod:`memjobs_worker.memory.queued`), and the jobs retrying are a record the
workers keep (:mod:`memjobs_worker.observability.retrying`), read by the
console and ``memjobs drain``, whatever the backlog.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import dramatiq
import redis
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer, _scripts
from dramatiq.common import current_millis, dq_name, xq_name
from dramatiq.errors import ConnectionClosed, DecodeError
from dramatiq.middleware import CurrentMessage, Middleware, MiddlewareError, Retries, SkipMessage
from dramatiq.worker import WorkerThread

from memjobs_client import keys
from memjobs_client.contracts import CHEAP_QUEUES, QUEUE_KNOWLEDGE, QUEUES
from memjobs_client.contracts.base import current_schema_version, schema_version_of
from memjobs_client.errors import InvalidPayload
from memjobs_client.redis_seam import as_bytes, as_str, evalsha_each, redis_best_effort, redis_errors
from memjobs_worker.embedding.fair import OwnerTurns
from memjobs_worker.erased import DropErasedOwners
from memjobs_worker.grouped import Grouped
from memjobs_worker.jobs import use_outage_retries
from memjobs_worker.memory.queued import SettleQueuedRemembers
from memjobs_worker.observability.failures import RecordFailures
from memjobs_worker.observability.heartbeat import Heartbeat
from memjobs_worker.observability.jobstats import JobStats
from memjobs_worker.observability.message import JobMiddleware
from memjobs_worker.observability.metrics import NEWER_SCHEMA_DEFERRED, WRITTEN_TOGETHER
from memjobs_worker.observability.observe import ObserveJobs
from memjobs_worker.observability.retrying import RetryingRecord, TrackRetrying
from memjobs_worker.observability.running import TrackRunning
from memjobs_worker.ops.pauses import HonourPauses, PauseGate
from memjobs_worker.ops.server import MetricsEndpoint
from memjobs_worker.refusals import RefuseSensitive
from memjobs_worker.runtime import connect_redis
from memjobs_worker.settings import RedisSettings, WorkerSettings

log = logging.getLogger(__name__)


#: How often a consumer compares its worker's unacknowledged messages with
#: what the worker holds (:meth:`_Consumer._put_back_stranded`), in seconds.
AUDIT_EVERY_S = 5.0


class _Consumer(_RedisConsumer):
    def __init__(self, broker: MemjobsRedisBroker, queue_name: str, prefetch: int, timeout: int) -> None:
        # Dramatiq's idle consumer sleeps up to ``timeout`` (the worker's, 1 s)
        # between looks at an empty queue: a queue a producer waits on looks sooner.
        polls: dict[str, int] = getattr(broker, "poll_ms", {})
        timeout = min(timeout, polls.get(queue_name, timeout))
        super().__init__(broker, queue_name, prefetch, timeout)  # type: ignore[no-untyped-call]
        self._audit_at = 0.0  # the first fetch puts back what a predecessor left

    def __next__(self) -> Any:
        gate: PauseGate | None = getattr(self.broker, "pause_gate", None)
        if time.monotonic() >= self._audit_at:
            try:
                self._put_back_stranded()
            except (redis.ConnectionError, redis.TimeoutError) as exc:  # the thread restarts, as on a fetch
                raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]
            self._audit_at = time.monotonic() + AUDIT_EVERY_S
        while True:
            if gate is not None and gate.is_paused(self.queue_name):
                self._put_back_prefetched()
                time.sleep(min(self.timeout, gate.poll_ms) / 1000)
                return None  # the consumer thread loops (and sees a stop) as when idle
            try:
                message = super().__next__()  # type: ignore[no-untyped-call]
            except DecodeError as exc:
                self._dead_letter(exc.data)
                continue
            if message is not None:
                self._handed[_redis_id(message)] = "eta" in message.options
            return message

    @property
    def _handed(self) -> dict[str, bool]:
        return self.broker.handed_out(self.queue_name)  # type: ignore[no-any-return]

    def ack(self, message: MessageProxy) -> None:
        # As Dramatiq's own (_RedisConsumer.ack), through the broker's grouped acks.
        try:
            self.broker.ack_together(self.queue_name, _redis_id(message))
        except redis.ConnectionError as exc:
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]
        finally:
            self.queued_message_ids.discard(message.message_id)
        self._handed.pop(_redis_id(message), None)

    def nack(self, message: MessageProxy) -> None:
        super().nack(message)  # type: ignore[no-untyped-call]
        self._handed.pop(_redis_id(message), None)

    def requeue(self, messages: Any) -> None:
        """Put messages back onto the queue (a consumer closing: a restart, a
        shutdown). Redis not answering raises ConnectionClosed, as ack and
        nack do, which Dramatiq's close expects: anything else escapes its
        consumer thread, which dies, and the queue's delayed messages with it.
        Those not put back stay unacknowledged: the next consumer's audit, or
        once this worker is dead Dramatiq's maintenance, puts them back."""
        messages = list(messages)
        for message in messages:
            self._handed.pop(_redis_id(message), None)
        try:
            super().requeue(messages)  # type: ignore[no-untyped-call]
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Put back what this consumer fetched and has not handed out, as it
        closes (a worker's graceful stop): Dramatiq's Redis consumer leaves its
        prefetched messages unacknowledged, so they waited for this worker's
        heartbeat to expire and another's maintenance before anyone ran them.
        Redis not answering raises ConnectionClosed, which Dramatiq's close
        expects (those messages then wait for that maintenance, as before)."""
        try:
            self._put_back_prefetched()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]
        super().close()

    def _put_back_stranded(self) -> None:
        """Put back onto the queue this worker's unacknowledged messages that
        nobody here holds any more (see the module): those a consumer before
        this one prefetched, and delayed ones its thread dropped. Held are the
        messages prefetched and not yet handed out, those handed to a worker
        thread (acknowledged when done), and the delayed ones still in this
        consumer thread's delay queue. Runs in the consumer thread (which alone
        fetches and hands out), before the first fetch and every
        :data:`AUDIT_EVERY_S`; the put-back skips an id acknowledged meanwhile."""
        handed = dict(self._handed)  # before the read below
        delay_queue = getattr(threading.current_thread(), "delay_queue", None)
        waiting = None if delay_queue is None else {_redis_id(item.message) for item in list(delay_queue.queue)}
        dropped = {i for i, delayed in handed.items() if delayed and waiting is not None and i not in waiting}
        held = (handed.keys() - dropped) | {_redis_id(data) for data in self.message_cache}
        unacked = {
            as_str(raw) for raw in self.broker.client.smembers(keys.acks(self.broker.broker_id, self.queue_name))
        }
        stranded = sorted(unacked - held)
        for redis_id in dropped:  # put back below
            self._handed.pop(redis_id, None)
        if stranded:
            self.broker.do_requeue(self.queue_name, *stranded)
            log.warning(
                "unacknowledged messages this worker no longer held put back",
                extra={
                    "queue": self.queue_name,
                    "put_back": len(stranded),
                    "dropped_delayed": len(dropped),
                    "reason": "stranded_messages",
                },
            )

    def _put_back_prefetched(self) -> None:
        """Return what this consumer fetched but has not handed out to its queue (the
        broker's ``requeue``: out of the unacknowledged set, onto the queue's end)."""
        ids, kept = [], []
        for data in self.message_cache:
            redis_id = _redis_id(data)
            if redis_id:
                ids.append(redis_id)
            else:
                kept.append(data)  # undecodable: the normal path dead-letters it after the pause
        self.message_cache = kept
        if ids:
            self.broker.do_requeue(self.queue_name, *ids)

    def _dead_letter(self, data: bytes) -> None:
        broker = self.broker
        acks = keys.acks(broker.broker_id, self.queue_name)
        messages = keys.messages(self.queue_name)
        for raw_id in broker.client.smembers(acks):
            if broker.client.hget(messages, raw_id) == data:
                message_id = as_str(raw_id)
                broker.do_nack(self.queue_name, message_id)
                log.warning(
                    "undecodable message dead-lettered",
                    extra={"queue": self.queue_name, "reason": "undecodable_message"},
                )
                return
        log.warning(
            "undecodable message dropped: not found among this consumer's messages",
            extra={"queue": self.queue_name, "reason": "undecodable_message"},
        )


#: How long a worker thread waits between tries at moving its message while
#: Redis does not answer, and how often it says so.
MOVE_RETRY_S = 1.0
REFUSED_LOG_EVERY_S = 30.0

#: Dispatch commands that only move or delete messages already in Redis.
_DRAIN_COMMANDS = frozenset({"fetch", "ack", "nack", "requeue"})
#: Redis ≥ 7: the script may run while Redis is over its maxmemory.
_ALLOW_OOM = b"#!lua flags=allow-oom\n"


def _does_something(middleware: Middleware, name: str) -> bool:
    """Whether the middleware's ``name`` hook is more than the no-op it inherits
    (:class:`~dramatiq.middleware.Middleware`'s, or a :class:`JobMiddleware`'s
    whose ``job_processed`` is the default)."""
    if name in getattr(middleware, "__dict__", ()):
        return True  # set on the instance
    method = getattr(type(middleware), name, None)
    if method is None:
        return False
    if method is getattr(Middleware, name, None):
        return False
    return not (
        name == "after_process_message"
        and method is JobMiddleware.after_process_message
        and getattr(type(middleware), "job_processed", None) is JobMiddleware.job_processed
    )


class MemjobsRedisBroker(RedisBroker):
    """A RedisBroker whose consumers dead-letter what they cannot decode and
    drain a full Redis (see the module's docstring)."""

    #: Per queue, the longest its idle consumers sleep between looks, in ms (build_broker).
    poll_ms: dict[str, int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._drain_script = self.client.register_script(_ALLOW_OOM + _scripts["dispatch"])
        self._allow_oom: bool | None = None  # Redis ≥ 7 (script flags): known on first use
        self._moving = threading.local()
        #: Which queues an operator paused (ops/pauses.py): the consumers fetch nothing from them.
        self.pause_gate: PauseGate | None = None
        #: Per queue, the messages its consumers handed out and not yet acknowledged,
        #: each with whether it waits for its eta in the consumer thread (_Consumer).
        self._handed: dict[str, dict[str, bool]] = {}
        #: Per hook name: the middleware list it was worked out for, and the hooks (:meth:`_hooks`).
        self._hook_cache: dict[str, tuple[list[Middleware], list[Middleware]]] = {}
        self._acks: Grouped[tuple[str, str], None] = Grouped(
            self._ack_each, on_batch=WRITTEN_TOGETHER.labels("acks").observe
        )

    def ack_together(self, queue_name: str, redis_message_id: str) -> None:
        """Acknowledge one message on ``queue_name`` (as Dramatiq's ``do_ack``):
        the acknowledgements the worker threads make at the same time go to
        Redis in one round trip (:class:`~memjobs_worker.grouped.Grouped`).

        Raises:
            redis.RedisError: Redis did not answer (the message stays unacknowledged).
        """
        self._acks((queue_name, redis_message_id))

    def _ack_each(self, acks: list[tuple[str, str]]) -> list[None | Exception]:
        script = self._drain_script if self._allows_oom() else self.scripts["dispatch"]
        # Dramatiq's dispatch arguments (RedisBroker._dispatch); an ack does no maintenance.
        head = [current_millis(), self.broker_id, self.heartbeat_timeout, self.dead_message_ttl, 0]
        unpack = self._max_unpack_size()  # type: ignore[no-untyped-call]
        calls = [
            ([self.namespace], ["ack", head[0], queue_name, *head[1:], unpack, message_id])
            for queue_name, message_id in acks
        ]
        evalsha_each(self.client, script, calls)
        return [None] * len(acks)

    def emit_before(self, signal: str, *args: Any, **kwargs: Any) -> None:
        # As Dramatiq's, over only the middlewares that do something on the signal.
        signal = "before_" + signal
        for middleware in self._hooks(signal, reverse=False):
            try:
                getattr(middleware, signal)(self, *args, **kwargs)
            except MiddlewareError:
                raise
            except Exception:
                self.logger.critical("Unexpected failure in %s of %r.", signal, middleware, exc_info=True)

    def emit_after(self, signal: str, *args: Any, **kwargs: Any) -> None:
        # As Dramatiq's, over only the middlewares that do something on the signal.
        signal = "after_" + signal
        for middleware in self._hooks(signal, reverse=True):
            try:
                getattr(middleware, signal)(self, *args, **kwargs)
            except Exception:
                self.logger.critical("Unexpected failure in %s of %r.", signal, middleware, exc_info=True)

    def _hooks(self, name: str, *, reverse: bool) -> list[Middleware]:
        """The middlewares whose ``name`` hook is not the base class's no-op, in
        the order Dramatiq calls them. Dramatiq calls every
        middleware on every signal (four a job, fifteen middlewares): in the
        cheap pool that was a fifth of a remember's CPU. Worked out again when
        the middleware list changes (compared item by item: cheap)."""
        cached = self._hook_cache.get(name)
        if cached is not None and cached[0] == self.middleware:
            return cached[1]
        order = list(reversed(self.middleware)) if reverse else list(self.middleware)
        hooks = [m for m in order if _does_something(m, name)]
        self._hook_cache[name] = (list(self.middleware), hooks)
        return hooks

    def handed_out(self, queue_name: str) -> dict[str, bool]:
        """The queue's messages handed to this worker and not yet acknowledged
        (redis id → delayed), one consumer thread per queue writing it."""
        return self._handed.setdefault(queue_name, {})

    @property
    def consumer_class(self) -> type[_RedisConsumer]:
        return _Consumer

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> dramatiq.Message[Any]:
        # A message that came from Redis (a retry, a delayed message coming due, a
        # newer schema's deferral) is moved, not added: it may go while Redis is full.
        moving = "redis_message_id" in message.options
        thread = threading.current_thread()
        refused_at: float | None = None
        while True:
            self._moving.active = moving
            try:
                return super().enqueue(message, delay=delay)
            except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError):
                # A worker thread moving its message (a retry) acknowledges the
                # delivery next: giving up here would lose the job. Tried again
                # until Redis takes it, as Dramatiq does the acknowledgement
                # itself; a worker stopped meanwhile leaves the delivery
                # unacknowledged, for the broker to requeue.
                if not (moving and isinstance(thread, WorkerThread) and thread.running):
                    raise
                if refused_at is None or time.monotonic() - refused_at >= REFUSED_LOG_EVERY_S:
                    refused_at = time.monotonic()
                    log.warning(
                        "a retry could not be queued: Redis did not answer; trying again until it does",
                        extra={"actor": message.actor_name, "reason": "backend_unavailable"},
                    )
                time.sleep(MOVE_RETRY_S)
            finally:
                self._moving.active = False

    def _dispatch(self, command: str) -> Callable[..., Any]:
        stock: Callable[..., Any] = super()._dispatch(command)  # type: ignore[no-untyped-call]
        draining = command in _DRAIN_COMMANDS or (command == "enqueue" and getattr(self._moving, "active", False))
        if not draining or not self._allows_oom():
            return stock

        def do_dispatch(queue_name: str, *args: Any) -> Any:
            # As Dramatiq's own (RedisBroker._dispatch), through the allow-oom script.
            argv = [
                command,
                current_millis(),
                queue_name,
                self.broker_id,
                self.heartbeat_timeout,
                self.dead_message_ttl,
                self._should_do_maintenance(command),
                self._max_unpack_size(),  # type: ignore[no-untyped-call]
                *args,
            ]
            try:
                return self._drain_script(args=argv, keys=[self.namespace])
            except redis.ResponseError as exc:
                text = str(exc).lower()
                if isinstance(exc, redis.OutOfMemoryError) or not any(
                    word in text for word in ("flag", "shebang", "compiling")
                ):
                    raise
                log.warning(
                    "this Redis runs no script flags (Redis < 7): workers cannot drain it once it is full",
                    extra={"reason": "no_allow_oom"},
                )
                self._allow_oom = False
                return stock(queue_name, *args)

        return do_dispatch

    def _allows_oom(self) -> bool:
        """Whether this Redis runs scripts flagged ``allow-oom`` (Redis ≥ 7), asked once."""
        if self._allow_oom is None:
            with redis_best_effort() as asked:
                version = str(self.client.info("server").get("redis_version", "0"))
            if asked.failed or not version.split(".")[0].isdigit():
                return False  # asked again next time; this call goes the stock way
            self._allow_oom = int(version.split(".")[0]) >= 7
            if not self._allow_oom:
                log.warning(
                    "Redis < 7 runs no script flags: workers cannot drain it once it is full (maxmemory)",
                    extra={"reason": "no_allow_oom"},
                )
        return self._allow_oom


class DeferNewerSchema(Middleware):
    """Leave a message of a newer schema version for a newer worker.

    During a rolling upgrade, upgraded producers may send a version the workers
    not yet upgraded do not read. Such a worker requeues the message with a
    delay (``delay_ms``; its own copy is acknowledged), counts it
    (``memjobs_newer_schema_deferred_total{actor}``) and goes on: a newer
    worker takes it on one of its next deliveries. A message still unread after
    ``max_age_ms`` (no newer worker came) is dead-lettered, to be retried once
    the upgrade is done. Older versions are read (see the contracts).
    """

    def __init__(self, delay_ms: int, max_age_ms: int) -> None:
        self.delay_ms = delay_ms
        self.max_age_ms = max_age_ms

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        payload = message.args[0] if len(message.args) == 1 else None
        version = schema_version_of(payload)
        readable = current_schema_version()
        if version is None or version <= readable:
            return  # readable, or malformed: the actor's validation says so
        actor = message.actor_name if message.actor_name in broker.actors else "unknown"
        if time.time() * 1000 - message.message_timestamp > self.max_age_ms:
            raise InvalidPayload(
                f"schema version {version} is newer than this worker reads (1 to {readable}) "
                f"and no newer worker took it in {self.max_age_ms // 1000} s",
                reason="newer_schema",
            )
        broker.enqueue(message, delay=self.delay_ms)  # type: ignore[arg-type]  # the proxy, as Retries does
        NEWER_SCHEMA_DEFERRED.labels(actor).inc()
        log.info(
            "message of a newer schema version left for a newer worker",
            extra={
                "actor": actor,
                "schema_version": version,
                "readable": readable,
                "message_id": message.message_id,
                "reason": "newer_schema",
            },
        )
        raise SkipMessage("newer schema version")


def build_broker(
    redis_url: str,
    redis_settings: RedisSettings,
    workers: WorkerSettings,
    *,
    serve_metrics: bool,
    knowledge_on: bool,
) -> MemjobsRedisBroker:
    """A Redis broker in the ``memjobs`` namespace with every queue declared (the
    knowledge queue only with ``knowledge_on``: a worker consumes what is declared);
    ``serve_metrics``: this pool serves the host's metrics endpoint
    (``MEMJOBS_METRICS_ENDPOINT``)."""
    broker = MemjobsRedisBroker(
        client=connect_redis(redis_url, redis_settings),  # bounded calls; Sentinel when set
        namespace=keys.NAMESPACE,
        heartbeat_timeout=workers.broker_heartbeat_timeout_ms,
        # Requeue a dead worker's messages promptly (Dramatiq's default is rare):
        # one dispatch in ten checks for dead workers (a ZRANGEBYSCORE).
        maintenance_chance=100_000,
    )
    use_outage_retries(broker, workers)  # outages retried on a time budget, not a count
    broker.pause_gate = PauseGate(broker.client)
    # A remember after a quiet spell reached the ledger up to a second late: the
    # cheap queues' consumers look every fast_worker_poll_ms at most (their delay
    # queues, and the model jobs, which wait on the model far longer, keep Dramatiq's).
    broker.poll_ms = dict.fromkeys(CHEAP_QUEUES, workers.fast_worker_poll_ms)
    # First: a paused queue's message goes back before any other middleware sees it.
    broker.add_middleware(HonourPauses(broker.pause_gate), before=type(broker.middleware[0]))
    broker.add_middleware(CurrentMessage())
    broker.add_middleware(DropErasedOwners(broker.client))  # before any other job logic
    broker.add_middleware(DeferNewerSchema(workers.newer_schema_delay_ms, workers.newer_schema_max_age_ms))
    # Before Retries in the list: "after" hooks run in reverse, so Retries has
    # already decided retry or dead-letter when ObserveJobs records the outcome.
    broker.add_middleware(ObserveJobs(JobStats(broker.client)), before=Retries)
    broker.add_middleware(RefuseSensitive(), before=Retries)  # between the two: see refusals.py
    # Runs after Retries has decided and after RefuseSensitive: see observability/retrying.py.
    broker.add_middleware(TrackRetrying(RetryingRecord(broker.client)), before=Retries)
    broker.add_middleware(RecordFailures(broker.client))  # after Retries: see failures.py
    broker.add_middleware(
        Heartbeat(broker.client, interval_ms=workers.heartbeat_interval_ms, ttl_ms=workers.heartbeat_ttl_ms)
    )
    broker.add_middleware(TrackRunning(broker.client, ttl_ms=workers.heartbeat_ttl_ms))
    broker.add_middleware(MetricsEndpoint(serve_metrics))
    broker.add_middleware(SettleQueuedRemembers(broker.client))  # a forget's O(1) "was it sent?"
    broker.add_middleware(OwnerTurns())  # a job's embeddings are its owner's turns
    for queue in QUEUES:
        if queue != QUEUE_KNOWLEDGE or knowledge_on:  # opt-in: off, never consumed
            broker.declare_queue(queue)
    return broker


# Dramatiq's stored messages, read for an operator command -----------------------

#: Messages read per hash at most (a report, not an inventory).
SCAN_LIMIT = 2000


def scan_messages(client: redis.Redis, limit: int = SCAN_LIMIT) -> Iterator[tuple[str, bytes]]:
    """(queue, raw message) of every message not yet acknowledged — ready,
    delayed or in flight — at most ``limit`` per hash, in no particular order."""
    for queue in QUEUES:
        for name in (queue, dq_name(queue)):
            for seen, (_mid, raw) in enumerate(client.hscan_iter(keys.messages(name), count=500)):
                if seen >= limit:
                    break
                yield queue, raw


def owner_has_messages(client: redis.Redis, owner_key: str) -> bool:
    """Whether any unacknowledged message (among those scanned) names this owner's key.

    Raises:
        BackendUnavailable: Redis did not answer.
    """
    needle = owner_key.encode()
    with redis_errors():
        return any(needle in raw for _queue, raw in scan_messages(client))


# Dramatiq's stored messages, a page at a time, for the console ------------------

#: The states a stored message is paged in.
STATES = ("queued", "delayed", "in_flight", "dead")
#: Messages read per Redis call when paging.
CHUNK = 200
#: Messages read per page at most, matches or not (a search stops there and
#: offers the next page from where it stopped).
PAGE_BUDGET = 2_000


@dataclass(frozen=True)
class StoredMessage:
    """One message as Dramatiq's broker stores it (the console decodes it)."""

    queue: str
    state: str
    redis_id: str
    data: bytes
    score: float | None = None  # dead: when it died (epoch ms)


@dataclass(frozen=True)
class MessagePage:
    messages: list[StoredMessage]
    cursor: str | None  # where the next page starts; None: nothing after
    scanned: int  # messages read to fill this page


def _redis_id(message: Any) -> str:
    """A message's id in Redis, from the message or its stored bytes ("" when unreadable)."""
    if isinstance(message, bytes | str):
        try:
            message = dramatiq.Message.decode(as_bytes(message))
        except DecodeError:
            return ""
    return str(message.options.get("redis_message_id", ""))


def _chunk(
    client: redis.Redis, state: str, queue: str, pos: int, count: int
) -> tuple[list[tuple[int | None, StoredMessage]], int | None]:
    """Up to about ``count`` messages of ``queue`` in ``state`` from ``pos``, each with
    the position just after it (None where a page cannot stop mid-chunk), and the
    position after the chunk (None: the end). Positions: an offset into the ready list
    (FIFO) or the dead set (newest first), or an HSCAN cursor of the delayed hash."""
    if state in ("queued", "dead"):
        dead = keys.dead_letters(queue)
        if state == "queued":
            ids = [as_str(i) for i in client.lrange(keys.queue(queue), pos, pos + count - 1)]
            scores: dict[str, float] = {}
        else:
            members: list[tuple[Any, float]] = client.zrevrange(  # type: ignore[assignment]
                dead, pos, pos + count - 1, withscores=True
            )
            ids = [as_str(i) for i, _ in members]
            scores = {as_str(i): float(s) for i, s in members}
        datas = client.hmget(keys.messages(queue) if state == "queued" else f"{dead}.msgs", ids) if ids else []
        found: list[tuple[int | None, StoredMessage]] = [
            (pos + k + 1, StoredMessage(queue, state, i, as_bytes(d), scores.get(i)))
            for k, (i, d) in enumerate(zip(ids, datas, strict=True))
            if d is not None
        ]
        return found, (pos + len(ids) if len(ids) == count else None)
    if state == "delayed":
        after, pairs = client.hscan(keys.messages(dq_name(queue)), pos, count=count)
        found = [(None, StoredMessage(queue, state, as_str(i), as_bytes(d))) for i, d in pairs.items()]  # type: ignore[union-attr]
        return found, (int(after) or None)
    if state == "in_flight":  # fetched by a live consumer: at most its prefetch each
        consumers = [as_str(c) for c in client.zrange(keys.BROKER_HEARTBEATS, 0, -1)]
        ids = sorted({as_str(i) for c in consumers for i in client.smembers(keys.acks(c, queue))})
        return [(None, m) for m in _with_data(client, keys.messages(queue), queue, state, ids[:PAGE_BUDGET])], None
    raise ValueError(f"no state {state!r}: one of {', '.join(STATES)}")


def _with_data(client: redis.Redis, hash_name: str, queue: str, state: str, ids: list[str]) -> list[StoredMessage]:
    if not ids:
        return []
    datas = client.hmget(hash_name, ids)
    return [StoredMessage(queue, state, i, as_bytes(d)) for i, d in zip(ids, datas, strict=True) if d is not None]


def page_messages(
    client: redis.Redis,
    state: str,
    *,
    queue: str | None = None,
    cursor: str | None = None,
    want: int = 50,
    budget: int = PAGE_BUDGET,
    accept: Callable[[StoredMessage], bool] | None = None,
) -> MessagePage:
    """One page of the stored messages in ``state`` (of ``queue``, or of every queue
    in turn): ``want`` that ``accept`` takes when there are that many within ``budget``
    messages read (a delayed page may hold a few more: an HSCAN cannot stop mid-chunk),
    and the cursor of the next page. At most ``budget`` messages are read (and what one
    HSCAN returns beyond its count), whatever the backlog.

    Raises:
        ValueError: no such state or queue, or a cursor this function did not give.
        BackendUnavailable: Redis did not answer.
    """
    names = QUEUES if queue is None else (queue,)
    if queue is not None and queue not in QUEUES:
        raise ValueError(f"no queue {queue!r}")
    index, _, at = (cursor or "0:0").partition(":")
    if not (index.isdigit() and at.isdigit()):
        raise ValueError(f"not a cursor: {cursor!r}")
    qi, pos = int(index), int(at)
    found: list[StoredMessage] = []
    scanned = 0
    with redis_errors():
        while qi < len(names) and len(found) < want and scanned < budget:
            count = min(CHUNK, budget - scanned, want - len(found) if accept is None else CHUNK)
            batch, after = _chunk(client, state, names[qi], pos, count)
            for stop, message in batch:
                scanned += 1
                if accept is None or accept(message):
                    found.append(message)
                    if len(found) >= want and stop is not None:
                        after = stop  # the next page starts right after it
                        break
            qi, pos = (qi + 1, 0) if after is None else (qi, after)
    return MessagePage(found, None if qi >= len(names) else f"{qi}:{pos}", scanned)


def _fetched(client: redis.Redis, queue: str, redis_id: str) -> bool:
    """Whether a live consumer holds this message of ``queue`` (fetched, not acknowledged)."""
    consumers = [as_str(c) for c in client.zrange(keys.BROKER_HEARTBEATS, 0, -1)]
    return any(client.sismember(keys.acks(c, queue), redis_id) for c in consumers)


def find_message(client: redis.Redis, ident: str, budget: int = 2 * PAGE_BUDGET) -> StoredMessage | None:
    """The stored message whose broker id or Dramatiq message id is ``ident``: the
    broker id is one HGET per hash; a message id is looked for among at most
    ``budget`` messages of each state (a dead letter, a delayed retry, …).

    Raises:
        BackendUnavailable: Redis did not answer.
    """
    with redis_errors(), client.pipeline(transaction=False) as pipe:
        where = []
        for queue in QUEUES:
            for state, name in (
                ("queued", keys.messages(queue)),
                ("delayed", keys.messages(dq_name(queue))),
                ("dead", f"{keys.dead_letters(queue)}.msgs"),
            ):
                pipe.hget(name, ident)
                where.append((queue, state))
        for (queue, state), data in zip(where, pipe.execute(), strict=True):
            if data is not None:
                if state == "queued" and _fetched(client, queue, ident):
                    state = "in_flight"
                return StoredMessage(queue, state, ident, as_bytes(data))
    needle = f'"message_id":"{ident}"'.encode()
    for state in ("in_flight", "delayed", "dead", "queued"):
        cursor: str | None = None
        read = 0
        while read < budget:
            page = page_messages(
                client,
                state,
                cursor=cursor,
                want=1,
                budget=min(PAGE_BUDGET, budget - read),
                accept=lambda m: needle in m.data,
            )
            if page.messages:
                return page.messages[0]
            read += page.scanned
            cursor = page.cursor
            if cursor is None or page.scanned == 0:
                break
    return None


class OwnerMessages(NamedTuple):
    """What :func:`drop_owner_messages` found of one owner."""

    dropped: int  # ready, delayed or dead-lettered messages deleted
    running: int  # messages a consumer holds now (running or prefetched): left to it


def drop_owner_messages(client: redis.Redis, owner_key: str) -> OwnerMessages:
    """Delete every stored message naming ``owner_key`` (every payload carries
    it), in every queue: ready, delayed, dead-lettered. A ready message is
    deleted only if it is still in its queue's list (taken out in one
    ``LREM``): one a consumer took meanwhile is counted as running and left to
    it (:class:`DropErasedOwners` drops it unrun, or the erasure waits for it).
    A delayed message a consumer holds until it is due is deleted from Redis;
    when due, it comes back through its queue, where it is dropped.

    Reads every message of every queue (an erasure is rare; no request path
    calls it).

    Raises:
        BackendUnavailable: Redis did not answer.
    """
    needle = owner_key.encode()
    dropped = running = 0
    with redis_errors():
        for queue in QUEUES:
            for name, kind in ((queue, "ready"), (dq_name(queue), "delayed"), (xq_name(queue), "dead")):
                stored = keys.messages(name)
                found = [mid for mid, raw in client.hscan_iter(stored, count=500) if needle in raw]
                for mid in found:
                    if kind == "dead":
                        client.zrem(keys.dead_letters(queue), mid)
                    elif not client.lrem(keys.queue(name), 0, mid) and kind == "ready":
                        running += 1
                        continue
                    client.hdel(stored, mid)
                    dropped += 1
    return OwnerMessages(dropped, running)
