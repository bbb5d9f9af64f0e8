"""Every Redis key memjobs reads or writes, named in one place.

memjobs' own keys live under the ``memjobs`` namespace and carry sha256(owner
id) (an *owner key*), never the id. Dramatiq's keys are built from
:mod:`dramatiq.common` (``q_name``, ``dq_name``, ``xq_name``) and the
Redis broker's documented layout, not retyped from its suffixes.

Dramatiq's Redis broker keeps, per queue ``q`` in namespace ``ns``:
``ns:q`` (ready ids), ``ns:q.msgs`` (id → message), ``ns:q.DQ`` and its own
``.msgs`` (delayed), ``ns:q.XQ`` (dead letters, a sorted set),
``ns:__acks__.<worker id>.<q>`` (in flight, per consumer) and
``ns:__heartbeats__`` (consumers' heartbeats, a sorted set).
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from dramatiq.common import dq_name, xq_name

#: The namespace of every memjobs key, Dramatiq's included.
NAMESPACE = "memjobs"


# Dramatiq's keys -----------------------------------------------------------


def queue(queue_name: str) -> str:
    """The list of ready message ids of ``queue_name``."""
    return f"{NAMESPACE}:{queue_name}"


def delay_queue(queue_name: str) -> str:
    """The list of ready ids of ``queue_name``'s delay queue."""
    return f"{NAMESPACE}:{dq_name(queue_name)}"


def dead_letters(queue_name: str) -> str:
    """The sorted set of ``queue_name``'s dead-lettered message ids."""
    return f"{NAMESPACE}:{xq_name(queue_name)}"


def messages(queue_name: str) -> str:
    """The hash of ``queue_name``'s messages by id (any of the three queues)."""
    return f"{NAMESPACE}:{queue_name}.msgs"


def acks(broker_id: str, queue_name: str) -> str:
    """The set of ``queue_name``'s message ids one consumer holds, unacknowledged."""
    return f"{NAMESPACE}:__acks__.{broker_id}.{queue_name}"


#: Matches every consumer's unacknowledged set, for SCAN.
ACKS_PATTERN = f"{NAMESPACE}:__acks__.*"

#: Dramatiq's consumer heartbeats (a sorted set of broker ids by time).
BROKER_HEARTBEATS = f"{NAMESPACE}:__heartbeats__"


def acked_queue(acks_key: str, queue_names: tuple[str, ...]) -> str | None:
    """Which of ``queue_names`` an unacknowledged set belongs to (its delay
    queue counts as the queue), or None."""
    for name in queue_names:
        if acks_key.endswith((f".{name}", f".{dq_name(name)}")):
            return name
    return None


# memjobs' keys ------------------------------------------------------------


def lock(name: str, owner_key: str) -> str:
    """A lease lock (``learning``, ``reindex``) of one owner."""
    return f"{NAMESPACE}:lock:{name}:{owner_key}"


def lock_fence(name: str, owner_key: str) -> str:
    """The lock's fencing counter (``INCR`` on each acquisition)."""
    return f"{lock(name, owner_key)}:fence"


def lock_dirty(name: str, owner_key: str) -> str:
    """Set by a taker that found the lock held: the holder loops once more."""
    return f"{lock(name, owner_key)}:dirty"


def extraction_scheduled(owner_key: str) -> str:
    """The debounce flag: one scheduled extraction per owner at a time."""
    return f"{NAMESPACE}:sched:extract:{owner_key}"


def remember_queued(owner_key: str, source_id: str) -> str:
    """How many remembers of the owner's source are queued and not yet taken into
    the ledger (a count with a TTL): a forget decides ``not_found`` on it in one
    read, whatever the backlog (:mod:`memjobs_client.queued`)."""
    return f"{NAMESPACE}:queued:remember:{owner_key}:{source_id}"


def session_ended(owner_key: str, session_hash: str) -> str:
    """The set of session-end actors queued for (owner, session) by the
    producer's ``end_session`` (each is queued once; kept 7 days)."""
    return f"{NAMESPACE}:session-ended:{owner_key}:{session_hash}"


def knowledge_corpus(owner_key: str, corpus_id: str) -> str:
    """Prefix of a corpus sent in parts: its ``:docs`` and ``:parts`` sets."""
    return f"{NAMESPACE}:knowledge:corpus:{owner_key}:{corpus_id}"


def owner_keys_pattern(owner_key: str) -> str:
    """SCAN pattern of every memjobs key naming the owner's key (locks, fences,
    flags, queued-remember counts, session-end markers, corpus parts): what an
    erasure deletes. Every key builder above puts the owner key in the name."""
    return f"{NAMESPACE}:*{owner_key}*"


def owner_erased(owner_key: str) -> str:
    """Set while an owner is being erased, and for a while after: workers drop
    the owner's jobs instead of running them. Named by a hash of the owner key
    (sha256 of ``"erased:" + key``), so the marker holds neither the id nor
    the key an erasure removes everywhere else."""
    digest = hashlib.sha256(f"erased:{owner_key}".encode()).hexdigest()
    return f"{NAMESPACE}:erased:{digest}"


#: The erasure markers set now (:func:`owner_erased` names), each scored by
#: when it expires (epoch ms): what a worker reads once a second instead of
#: one marker per job.
ERASING = f"{NAMESPACE}:erasing"


class BreakerKeys(NamedTuple):
    """The keys of one model service's circuit breaker (no owner in them)."""

    open: str  # set (to when it opened, epoch ms) while the breaker is open
    failures: str  # outage failures in the current window (a counter with a TTL)
    probe: str  # the probe token (SET NX PX): one probe per interval, across hosts


def model_breaker(service: str) -> BreakerKeys:
    """The circuit breaker of a model service (``chat``, ``embed``)."""
    prefix = f"{NAMESPACE}:breaker:{service}"
    return BreakerKeys(f"{prefix}:open", f"{prefix}:failures", f"{prefix}:probe")


#: The jobs retrying now: a sorted set of Dramatiq message ids, each scored by
#: when it last failed (epoch ms), kept by the workers as jobs fail, are
#: retried and end (:mod:`memjobs_worker.observability.retrying`), so no
#: report reads the queued messages. No owner in it.
RETRYING = f"{NAMESPACE}:retrying"

#: What each job in :data:`RETRYING` is: message id → ``actor<TAB>reason<TAB>failures``.
RETRYING_JOBS = f"{NAMESPACE}:retrying:jobs"

#: Dead letters retried and purged by operators, by queue (a hash of
#: ``retried:<queue>`` and ``purged:<queue>`` counts, exported as counters).
DEAD_LETTER_ACTIONS = f"{NAMESPACE}:dead-letters:actions"

#: Written and waited on (WAITAOF / WAIT) when a producer checks durability.
DURABILITY_PROBE = f"{NAMESPACE}:durability"

#: Prefix of the worker processes' heartbeat keys (``<prefix><host>:<pid>``).
HEARTBEAT_PREFIX = f"{NAMESPACE}:heartbeat:"


def job_stats(minute: int) -> str:
    """The hash of per-actor outcome counts for one minute (epoch minutes)."""
    return f"{NAMESPACE}:stats:{minute}"


#: The queues paused by an operator: a hash of queue name → when it was paused
#: (epoch ms). Every worker's consumers read it before fetching
#: (:mod:`memjobs_worker.ops.pauses`); a paused queue's messages stay queued.
PAUSED_QUEUES = f"{NAMESPACE}:paused"

#: Prefix of the jobs each worker process runs now (``<prefix><host>:<pid>``, a
#: hash of message id → actor, queue, start; renewed with the heartbeat).
RUNNING_PREFIX = f"{NAMESPACE}:running:"


def running(host: str, pid: int | str) -> str:
    """The hash of the jobs one worker process is running now."""
    return f"{RUNNING_PREFIX}{host}:{pid}"


def timeline(resolution_s: int, bucket: int) -> str:
    """The hash of job counts and summed durations for one time bucket of
    ``resolution_s`` seconds (``bucket``: epoch seconds // resolution_s)."""
    return f"{NAMESPACE}:timeline:{resolution_s}:{bucket}"


def reindex_progress(owner_key: str) -> str:
    """A hash: the owner's reindex from the moment it is queued until its last
    part is written (:mod:`memjobs_client.reindexing`), for ``knowledge list``."""
    return f"{NAMESPACE}:knowledge:reindex:{owner_key}"
