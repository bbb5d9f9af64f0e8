"""The intake side of personal memory: a remembered source into the ledger, an
owner's extraction scheduled (debounced), and the sweeper that re-schedules
owners whose sources wait too long. Needs the ledger and Redis only, never the
engine: the processes that take the cheap jobs do not load mem0.

The scheduling seam is :class:`ExtractionScheduler` (the debounce bookkeeping,
with the flag left to a backend): :class:`RedisExtractionScheduler` keeps the
flag in Redis, :class:`InMemoryExtractionScheduler` in the twin leases'
:class:`~memjobs_worker.lease.stub.InMemoryKeys`. ``tests/memory/test_scheduler_contract.py`` holds both
to the same contract."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import redis

from memjobs_client import keys
from memjobs_client.contracts import ACTOR_EXTRACT, ExtractFacts, RememberSource
from memjobs_client.errors import BackendUnavailable
from memjobs_client.redis_seam import as_str, evalsha_each, redis_best_effort, redis_errors
from memjobs_worker.lease.base import DIRTY_LEASES, Monotonic
from memjobs_worker.lease.stub import InMemoryKeys
from memjobs_worker.memory.store.base import AddOutcome, StateStore

Enqueue = Callable[[str, dict[str, Any], int | None], None]

#: Owners remembered per scheduler before the expired ones are dropped.
_UNDELIVERED_MAX = 10_000


def remember(
    store: StateStore, scheduler: ExtractionScheduler, payload: RememberSource, *, sent_at: datetime
) -> AddOutcome:
    """Write to the ledger as pending, and schedule extraction: :func:`remember_many` for one.

    Raises:
        BackendUnavailable: the ledger or Redis did not answer.
    """
    outcome = remember_many(store, scheduler, [(payload, sent_at)])[0]
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def remember_many(
    store: StateStore, scheduler: ExtractionScheduler, requests: Sequence[tuple[RememberSource, datetime]]
) -> list[AddOutcome | Exception]:
    """Write each (payload, sent at) to the ledger as pending, and schedule its
    owner's extraction: the new sources in one statement and their owners'
    scheduling in one round trip (:meth:`ExtractionScheduler.schedule_many`),
    however many remembers came together. Each request's outcome, or the
    error that request's job fails with (and is retried on): a source written
    whose owner could not be scheduled fails, its retry a duplicate that
    schedules then.

    Each payload was validated (:func:`memjobs_client.validation.validate`): its
    text is within the byte cap and carries no credential. Needs only the ledger
    and Redis, never the engine: the processes that take the cheap jobs do not
    load mem0.

    A batch the ledger refuses for any other reason (no validated request
    should make it) is written one request at a time, so a request it
    cannot take fails alone.

    Raises:
        BackendUnavailable: the ledger did not answer (nothing was written).
    """
    try:
        written = store.add_new_sources(requests)
    except BackendUnavailable:
        raise
    except Exception:  # noqa: BLE001 - refused as a whole: each goes alone, and one bad request fails alone
        written = [False] * len(requests)
    outcomes: list[AddOutcome | Exception] = []
    due: list[int] = []  # the requests whose owner's extraction is to be scheduled
    for i, ((payload, sent_at), new) in enumerate(zip(requests, written, strict=True)):
        outcome: AddOutcome | Exception
        try:
            outcome = "created" if new else store.add_source(payload, sent_at=sent_at)
            # A duplicate that is still pending is a retry whose first attempt wrote
            # the ledger but could not schedule (Redis full or away): schedule now, or
            # the source would wait for the sweeper.
            if outcome in ("created", "revived") or (
                outcome == "duplicate" and store.source_state(payload.owner_key, payload.source_id) == "pending"
            ):
                due.append(i)
        except Exception as exc:  # noqa: BLE001 - this request's job fails with it, the others go on
            outcome = exc
        outcomes.append(outcome)
    try:
        scheduler.schedule_many([requests[i][0].owner_key for i in due], "remember")
    except Exception as exc:  # noqa: BLE001 - each due request's job fails with it (and is retried)
        for i in due:
            outcomes[i] = exc
    return outcomes


class ExtractionScheduler(ABC):
    """Enqueues ``extract_facts`` for an owner, debounced: one scheduled at a time.

    The debounce flag is the owner's "extraction queued" marker: set when an
    extraction is enqueued, cleared when one takes the learning lease (from then
    the lease says it: a new source then schedules the next run, or marks the
    holder dirty), and set again (:meth:`hold`) before a failed run lets the
    lease go to be retried, and cleared (:meth:`clear`) when it is dead-lettered.
    So an extraction queued, delayed or waiting out a retry always shows, by
    its flag or by the lease, and neither remember nor the sweeper enqueues a
    second one: a source that comes while a run holds the lease marks that run
    dirty (in the same step as the look), and the run, or its retry, learns it.
    Never more than one extraction per owner. The flag lives in the
    backend with a TTL (``marker_ttl_ms``), so a flag whose message was lost
    expires by itself; forget passes ``force`` anyway.

    A burst costs one round trip, not one per source: for the first half of
    the delay of a message this scheduler sent itself, a new source of the
    same owner skips the flag. That message is still waiting for its delay
    (Dramatiq delivers none early; hosts' clocks agree within half of it), so
    the extraction it starts, or the holder it marks dirty, reads the ledger
    after the source is in it.

    Parameters:
        enqueue: sends (actor, payload, delay in ms or None).
        lease_ms: the learning lease (the flag lasts at least as long).
        delay_ms: how long a scheduled extraction waits, so that a burst of
            sources shares one model call.
        monotonic: seconds, for the half-delay window (tests inject one).
        marker_ttl_ms: how long the flag lasts unless cleared (at least the
            lease and four delays): longer than any queue's wait and retry delay.
    """

    def __init__(
        self,
        enqueue: Enqueue,
        *,
        lease_ms: int,
        delay_ms: int,
        monotonic: Monotonic = time.monotonic,
        marker_ttl_ms: int = 0,
    ) -> None:
        self.enqueue = enqueue
        self.flag_ttl_ms = max(lease_ms, delay_ms * 4, marker_ttl_ms)
        self.dirty_ttl_ms = lease_ms * DIRTY_LEASES  # as long as a taker's (the lease's own)
        self.delay_ms = delay_ms
        self.monotonic = monotonic
        #: owner key → until when (``monotonic``) a message sent from here is surely undelivered
        self._undelivered: dict[str, float] = {}
        self._undelivered_lock = threading.Lock()

    # -- what a backend does ---------------------------------------------------------------

    @abstractmethod
    def _set_flag(self, owner_key: str, ttl_ms: int, *, only_if_new: bool) -> bool:
        """Set the owner's debounce flag for ``ttl_ms``; whether it was set
        (``only_if_new``: not when it is set already).

        Raises:
            BackendUnavailable: the backend did not answer.
        """

    @abstractmethod
    def _claim(self, owner_key: str, ttl_ms: int) -> bool:
        """In one step: while the owner's learning lease is held, set its dirty
        flag (the holder reads the ledger again before it lets go) and answer
        False; else set the owner's debounce flag for ``ttl_ms`` unless it is
        set; whether it was set (the caller then sends the extraction).

        Raises:
            BackendUnavailable: the backend did not answer.
        """

    @abstractmethod
    def clear(self, owner_key: str) -> None:
        """Delete the owner's debounce flag.

        Raises:
            BackendUnavailable: the backend did not answer.
        """

    @abstractmethod
    def is_scheduled(self, owner_key: str) -> bool:
        """Whether the owner's debounce flag is set.

        Raises:
            BackendUnavailable: the backend did not answer.
        """

    @abstractmethod
    def leases_held(self, owner_keys: Sequence[str]) -> list[bool]:
        """Whether each owner's learning lease is held (in one round trip).

        Raises:
            BackendUnavailable: the backend did not answer.
        """

    @abstractmethod
    def flags_history(self, owner_keys: Sequence[str]) -> list[str | None]:
        """The backend history each owner's debounce flag was set in ("" when
        the flag does not say), None where it is not set (one round trip).

        Raises:
            BackendUnavailable: the backend did not answer.
        """

    @abstractmethod
    def history(self, *, fresh: bool = False) -> str:
        """The backend's current history ("" when it has one only): Redis's
        replication id, new after a failover (a replica promoted). Writes just
        before a failover, an extraction's message among them, may be gone
        while the flag that announced it is not (Redis replicates
        asynchronously). ``fresh``: asked now, else as asked at most
        :data:`HISTORY_TTL_S` ago.

        Raises:
            BackendUnavailable: the backend did not answer.
        """

    # -- scheduling --------------------------------------------------------------------------

    def flag(self, owner_key: str) -> str:
        """The key of the owner's debounce flag (a lease's acquire clears it)."""
        return keys.extraction_scheduled(owner_key)

    def schedule(self, owner_key: str, trigger: str, *, force: bool = False) -> bool:
        """Send the owner's extraction unless one is scheduled already, or one
        holds the owner's lease (it is marked dirty instead: it learns the new
        source before it lets go, or its retry does); ``force``: send anyway.
        Whether a message was sent.

        Raises:
            BackendUnavailable: the backend did not answer.
        """
        if not force and self._surely_undelivered(owner_key):
            return False
        fresh = (
            self._set_flag(owner_key, self.flag_ttl_ms, only_if_new=True)
            if force
            else self._claim(owner_key, self.flag_ttl_ms)
        )
        if not fresh and not force:
            return False
        self._send_or_unflag(owner_key, trigger, flagged=fresh)
        return True

    def schedule_many(self, owner_keys: Sequence[str], trigger: str) -> int:
        """:meth:`schedule` for each owner (each once), their flags and leases
        looked at in one round trip (:meth:`_claim_many`); how many were sent.
        When a send fails, the flags set for the owners not sent yet are cleared
        (as :meth:`_send_or_unflag` clears its own) before the error goes up.

        Raises:
            BackendUnavailable: the backend did not answer.
        """
        due = [o for o in dict.fromkeys(owner_keys) if not self._surely_undelivered(o)]
        if not due:
            return 0
        fresh = [o for o, claimed in zip(due, self._claim_many(due, self.flag_ttl_ms), strict=True) if claimed]
        for i, owner_key in enumerate(fresh):
            try:
                self._send_or_unflag(owner_key, trigger, flagged=True)
            except BaseException:
                for unsent in fresh[i + 1 :]:
                    with contextlib.suppress(BackendUnavailable):
                        self.clear(unsent)
                raise
        return len(fresh)

    def _claim_many(self, owner_keys: Sequence[str], ttl_ms: int) -> list[bool]:
        """:meth:`_claim` for each owner; a backend may ask for all in one round trip.

        Raises:
            BackendUnavailable: the backend did not answer.
        """
        return [self._claim(owner_key, ttl_ms) for owner_key in owner_keys]

    def _send_or_unflag(self, owner_key: str, trigger: str, *, flagged: bool) -> None:
        """Send the owner's extraction; when it does not go out, clear the flag
        this call set (``flagged``): left behind, it would make the job's retry
        skip its send, and the sweeper the owner, until it expired."""
        try:
            self._send(owner_key, trigger, self.delay_ms)
        except BaseException:
            if flagged:
                with contextlib.suppress(BackendUnavailable):
                    self.clear(owner_key)
            raise

    def defer(self, owner_key: str, delay_ms: int) -> bool:
        """Re-enqueue the owner's scheduled extraction ``delay_ms`` from now,
        keeping its debounce flag (so new sources do not enqueue another).

        Returns False when the backend did not answer (the caller then runs now)."""
        try:
            self._set_flag(owner_key, max(self.flag_ttl_ms, delay_ms * 4), only_if_new=False)
        except BackendUnavailable:
            return False
        self._send(owner_key, "remember", delay_ms)
        return True

    def send_again(self, owner_key: str) -> bool:
        """Send the owner's extraction although its flag is set (the flag's message
        may have been lost: see :func:`sweep`), and set the flag afresh.

        Raises:
            BackendUnavailable: the backend did not answer.
        """
        self._set_flag(owner_key, self.flag_ttl_ms, only_if_new=False)
        self._send_or_unflag(owner_key, "sweep", flagged=True)
        return True

    def hold(self, owner_key: str) -> None:
        """Set the owner's flag again for a run that failed and will be retried:
        called while its lease is still held, so there is no moment when neither
        says an extraction is on its way (and the sweeper would send another).

        Raises:
            BackendUnavailable: the backend did not answer.
        """
        self._set_flag(owner_key, self.flag_ttl_ms, only_if_new=False)

    def _send(self, owner_key: str, trigger: str, delay_ms: int) -> None:
        payload = ExtractFacts.model_validate({"owner_key": owner_key, "trigger": trigger})
        until = self.monotonic() + delay_ms / 2000  # before: the message's delay runs from its send
        self.enqueue(ACTOR_EXTRACT, payload.model_dump(mode="json"), delay_ms or None)
        if delay_ms > 0:
            with self._undelivered_lock:
                if len(self._undelivered) >= _UNDELIVERED_MAX:
                    now = self.monotonic()
                    live = {k: t for k, t in self._undelivered.items() if t > now}
                    # (all live: forgetting them costs round trips, never a source)
                    self._undelivered = live if len(live) < _UNDELIVERED_MAX else {}
                self._undelivered[owner_key] = until

    def _surely_undelivered(self, owner_key: str) -> bool:
        """Whether a message sent from here for the owner is still in its delay's first half."""
        until = self._undelivered.get(owner_key)
        return until is not None and self.monotonic() < until


#: KEYS: the flag, the learning lease, its dirty flag; ARGV: the flag's and the
#: dirty flag's TTL (ms), the flag's value (when it is set, ms). See
#: :meth:`ExtractionScheduler._claim`.
_CLAIM = """
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[2])
  return 0
end
if redis.call('SET', KEYS[1], ARGV[3], 'NX', 'PX', ARGV[1]) then return 1 end
return 0
"""


#: How long a scheduler uses the backend's history it read before reading it again.
HISTORY_TTL_S = 5.0


def _flag_value(history: str) -> str:
    """A flag's value: the history it is set in, and when (ms, for a reader)."""
    return f"{history}:{int(time.time() * 1000)}"


def _flag_history(raw: object) -> str | None:
    """The history a flag's value names ("" for a flag that names none)."""
    return None if raw is None else as_str(raw).rpartition(":")[0]


class RedisExtractionScheduler(ExtractionScheduler):
    """The scheduler with its debounce flags in Redis (production).

    Parameters:
        redis_client: a redis-py client; the rest: see :class:`ExtractionScheduler`.
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        enqueue: Enqueue,
        *,
        lease_ms: int,
        delay_ms: int,
        monotonic: Monotonic = time.monotonic,
        marker_ttl_ms: int = 0,
    ) -> None:
        super().__init__(
            enqueue, lease_ms=lease_ms, delay_ms=delay_ms, monotonic=monotonic, marker_ttl_ms=marker_ttl_ms
        )
        self.redis = redis_client
        self._claim_script = redis_client.register_script(_CLAIM)
        #: (when read, monotonic s; Redis's replication id then)
        self._history: tuple[float, str] = (-math.inf, "")

    def _set_flag(self, owner_key: str, ttl_ms: int, *, only_if_new: bool) -> bool:
        value = _flag_value(self.history())
        with redis_errors():
            return bool(self.redis.set(self.flag(owner_key), value, nx=only_if_new, px=ttl_ms))

    def _claim(self, owner_key: str, ttl_ms: int) -> bool:
        return self._claim_many([owner_key], ttl_ms)[0]

    def _claim_many(self, owner_keys: Sequence[str], ttl_ms: int) -> list[bool]:
        value = _flag_value(self.history())
        with redis_errors():
            answers = evalsha_each(
                self.redis,
                self._claim_script,
                [
                    (
                        [self.flag(owner_key), keys.lock("learn", owner_key), keys.lock_dirty("learn", owner_key)],
                        [ttl_ms, self.dirty_ttl_ms, value],
                    )
                    for owner_key in owner_keys
                ],
            )
        return [bool(claimed) for claimed in answers]

    def flags_history(self, owner_keys: Sequence[str]) -> list[str | None]:
        if not owner_keys:
            return []
        with redis_errors():
            return [_flag_history(raw) for raw in self.redis.mget([self.flag(o) for o in owner_keys])]

    def history(self, *, fresh: bool = False) -> str:
        # (a stale one, up to HISTORY_TTL_S after a failover, only makes the
        # sweeper send a flag's message once more than needed)
        read, replid = self._history
        if fresh or time.monotonic() - read >= HISTORY_TTL_S:
            # A Redis (or a proxy) that will not say: "", no history (the flags
            # are trusted, as before); one that does not answer fails the next call.
            with redis_best_effort() as asked:
                replid = as_str(self.redis.info("replication").get("master_replid", ""))
            replid = "" if asked.failed else replid
            self._history = (time.monotonic(), replid)
        return replid

    def clear(self, owner_key: str) -> None:
        with redis_errors():
            self.redis.delete(self.flag(owner_key))

    def is_scheduled(self, owner_key: str) -> bool:
        with redis_errors():
            return bool(self.redis.exists(self.flag(owner_key)))

    def leases_held(self, owner_keys: Sequence[str]) -> list[bool]:
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            for owner_key in owner_keys:
                pipe.exists(keys.lock("learn", owner_key))
            return [bool(held) for held in pipe.execute()]


class InMemoryExtractionScheduler(ExtractionScheduler):
    """The scheduler's twin: its flags in :class:`InMemoryKeys`, on their clock.

    Give it the keyspace the twin leases are on (``keyspace.lease``), so that a lease's
    acquire clears the flag and :meth:`leases_held` sees the leases.
    """

    def __init__(self, keyspace: InMemoryKeys, enqueue: Enqueue, *, lease_ms: int, delay_ms: int) -> None:
        super().__init__(enqueue, lease_ms=lease_ms, delay_ms=delay_ms, monotonic=keyspace.monotonic)
        self.keyspace = keyspace

    def _set_flag(self, owner_key: str, ttl_ms: int, *, only_if_new: bool) -> bool:
        return self.keyspace.set(self.flag(owner_key), _flag_value(""), px=ttl_ms, nx=only_if_new)

    def _claim(self, owner_key: str, ttl_ms: int) -> bool:
        with self.keyspace.lock:
            if self.keyspace.exists(keys.lock("learn", owner_key)):
                self.keyspace.set(keys.lock_dirty("learn", owner_key), "1", px=self.dirty_ttl_ms)
                return False
            return self.keyspace.set(self.flag(owner_key), _flag_value(""), px=ttl_ms, nx=True)

    def flags_history(self, owner_keys: Sequence[str]) -> list[str | None]:
        with self.keyspace.lock:
            return [_flag_history(self.keyspace.get(self.flag(o))) for o in owner_keys]

    def history(self, *, fresh: bool = False) -> str:
        return ""  # process memory has one history

    def clear(self, owner_key: str) -> None:
        self.keyspace.delete(self.flag(owner_key))

    def is_scheduled(self, owner_key: str) -> bool:
        return self.keyspace.exists(self.flag(owner_key))

    def leases_held(self, owner_keys: Sequence[str]) -> list[bool]:
        with self.keyspace.lock:
            return [self.keyspace.exists(keys.lock("learn", owner_key)) for owner_key in owner_keys]


def sweep(store: StateStore, scheduler: ExtractionScheduler, now: datetime, pending_after_ms: int) -> int:
    """Re-enqueue extraction for owners with sources pending longer than the threshold.

    Skipped: owners whose learning lease is held (the holder loops until nothing
    is pending; a dead holder's lease expires within ``lease_ms``) and owners
    with an extraction already queued, delayed or waiting out a retry (the
    debounce flag; it expires by itself if its message was lost): during a
    model outage a retrying extraction is not joined by one more per pass. So a short threshold adds no message per
    pass to a long backlog, and drain is not kept busy by redundant work.

    Except after a failover of Redis: Redis replicates asynchronously, so a
    flag may have reached the new master while the message it announces did
    not. A flag set in an earlier history (:meth:`ExtractionScheduler.history`,
    Redis's replication id, which its value names) is not trusted: its owner's
    extraction is sent again, once per failover.

    Returns how many owners were re-enqueued.

    Raises:
        BackendUnavailable: Redis did not answer.
    """
    owners = store.owners_pending_since(now - timedelta(milliseconds=pending_after_ms))
    if not owners:
        return 0
    held = scheduler.leases_held(owners)
    free = [owner_key for owner_key, busy in zip(owners, held, strict=True) if not busy]
    # A flag set in an earlier history of Redis (before a failover) may announce
    # a message that did not survive it: sent again, once (the flag set afresh
    # names the current history).
    current = scheduler.history(fresh=True)
    histories = scheduler.flags_history(free) if current else [None] * len(free)
    lost = {o for o, h in zip(free, histories, strict=True) if h and h != current}
    # (schedule looks at the lease again, with the flag, in one step: a run may
    # have taken it, and cleared the flag, since the look above)
    return sum(
        scheduler.send_again(owner_key) if owner_key in lost else scheduler.schedule(owner_key, "sweep")
        for owner_key in free
    )
