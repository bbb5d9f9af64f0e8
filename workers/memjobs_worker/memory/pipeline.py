"""The personal-memory pipeline: remember → extract → learned, forget, recall.

The domain logic, free of Dramatiq: actors call these methods, and so do the
tests and the CLI's read commands.

Invariants kept here with the ledger's help:
- a source is in the ledger (``pending``) before any model sees it;
- one extraction per owner at a time (the fenced lease lock), and no lost
  wake-ups (the dirty flag makes the holder loop again);
- recall returns only memories whose sources are all ``learned``;
- a memory derived from a source forgotten during extraction is deleted, and
  the other sources of its batch are learned again without it;
- a crashed attempt's memories are deleted by the next holder before it starts;
- a batch the model answers badly for (prose, wrong-shape JSON, even when asked
  again: :mod:`~memjobs_worker.memory.engine.extraction_output`) keeps nothing
  and its sources end ``failed`` with the reason; the owner's next batch goes
  on. A model that is down fails the job instead: an outage, retried on the
  outage time budget (:class:`memjobs_worker.jobs.OutageRetries`), its owner
  still marked queued meanwhile (:meth:`ExtractionScheduler.hold`).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from memjobs_client.contracts import (
    ExtractFacts,
    ForgetSource,
    RememberSource,
)
from memjobs_client.errors import BackendUnavailable, LockLost, PermanentError, StaleFencingToken
from memjobs_worker.lease import Lease, LeaseFactory
from memjobs_worker.memory.engine.base import MemoryEngine
from memjobs_worker.memory.intake import ExtractionScheduler, remember
from memjobs_worker.memory.store.base import AddOutcome, Attempt, ForgetResult, PendingWindow, StateStore
from memjobs_worker.model_output import ModelOutputInvalid
from memjobs_worker.observability.metrics import lock_hook

log = logging.getLogger(__name__)

#: Micro-batching looks again at an owner's batch no sooner than this.
_RECHECK_MIN_MS = 50
#: Releases tried after a deferral before the run takes the new sources itself.
_LET_GO_TRIES = 3
#: An owner whose sources come at most ``max_wait_ms`` / this apart is a
#: stream: enough of them fit in one wait for a batch to be worth holding.
_STREAM_GAPS_PER_WAIT = 4


@dataclass
class ExtractReport:
    """What one ``extract_facts`` run did (for logs and tests)."""

    outcome: str = "idle"  # idle | busy | deferred | done
    attempts: int = 0
    learned: int = 0
    discarded: int = 0
    recovered: int = 0
    #: Sources marked failed, and why (the last reason when several batches failed).
    failed: int = 0
    failure: str | None = None


@dataclass(frozen=True)
class RecallHit:
    memory_id: str
    text: str
    score: float | None
    source_ids: list[str] = field(default_factory=list)


def mark_forgotten(
    store: StateStore, scheduler: ExtractionScheduler, owner_key: str, source_id: str, *, sent_at: datetime
) -> ForgetResult:
    """The ledger half of a forget, at once: the source is ``forgotten`` (recall
    stops returning its memories), the memories derived from it are owed a
    deletion (tombstones), and the sources that shared one are scheduled to be
    learned again. A source not in the ledger gets a forgotten marker, so its
    remember, if it comes later, finds it forgotten.

    The one way a source is forgotten: the ``forget_source`` job
    (:meth:`MemoryPipeline.forget`) and every door's forget
    (:class:`~memjobs_worker.memory.service.PersonalMemory`) call it.
    """
    result = store.forget(owner_key, source_id, sent_at=sent_at)
    if result.relearn:
        # Before the deletes: a retry after a failed delete finds no source left
        # to send back, so this is the one chance to schedule their relearning
        # (the extraction settles the tombstones before it starts anyway).
        scheduler.schedule(owner_key, "forget", force=True)
    return result


@dataclass(kw_only=True, eq=False)
class MemoryPipeline:
    """Personal memory for every owner, shared by all hosts through the store and Redis.

    Parameters:
        store: the ledger.
        engine: the memory engine (mem0).
        leases: makes the owners' learning leases (on Redis, or the twin's).
        scheduler: enqueues (debounced) extractions.
        batch_size: sources per extraction call.
        lease_ms: the learning lease.
        max_wait_ms: micro-batching's bound on how long an owner's oldest
            pending source waits for its batch to fill (0: never wait).
        deep_batch_size: sources per call when an owner has two full batches
            pending or more (a backlog), and what a fast stream's batch waits
            for (:meth:`_full_at`); ``batch_size`` or less: never larger.
        batch_bytes: a batch's texts stop at this many UTF-8 bytes (its first
            source goes whatever its size); 0: no bound.
        before_batch: called before each batch goes to the engine; in a process whose
            pools share it, it waits (a bounded while) for the cheap pool's
            work (:meth:`memjobs_worker.pools.SharedWorker.cheap_first`).
    """

    store: StateStore
    engine: MemoryEngine
    leases: LeaseFactory
    scheduler: ExtractionScheduler
    batch_size: int
    lease_ms: int
    max_wait_ms: int = 0
    deep_batch_size: int = 0
    batch_bytes: int = 0
    before_batch: Callable[[], None] = field(default=lambda: None)

    # -- remember ---------------------------------------------------------------

    def remember(self, payload: RememberSource, *, sent_at: datetime) -> AddOutcome:
        """See :func:`remember` (the pipeline's store and scheduler)."""
        return remember(self.store, self.scheduler, payload, sent_at=sent_at)

    def schedule_extraction(self, owner_key: str, trigger: str, *, force: bool = False) -> bool:
        return self.scheduler.schedule(owner_key, trigger, force=force)

    # -- extract ------------------------------------------------------------------

    def extract(self, payload: ExtractFacts) -> ExtractReport:
        """Learn the owner's pending sources, batch by batch, under the learning lock."""
        owner_key = payload.owner_key
        report = ExtractReport()
        if payload.trigger == "remember" and self._defer(owner_key):
            report.outcome = "deferred"
            return report
        lock = self.leases("learn", owner_key, lease_ms=self.lease_ms, on_event=lock_hook("learn"))
        # Floored at the ledger's newest token: never behind it, whatever Redis lost.
        # The scheduled flag goes first, in the same script: from then on a new
        # source schedules a new run (or sets the dirty flag).
        token = lock.try_acquire(floor=self.store.newest_token(owner_key), clear=self.scheduler.flag(owner_key))
        if token is None:
            report.outcome = "busy"
            return report
        report.outcome = "done"
        # A batch taken while the owner is still talking waits for the rest of
        # it, as the first one did: the run ends, and its deferred message learns
        # the rest. So does a batch the dirty flag brings back ("again"): the
        # sources that came during a model call, taken at once, were a stream's
        # batches of one or two. (The first batch was looked at before the lease.)
        may_defer = payload.trigger == "remember"
        looked = True
        try:
            with lock:
                while True:
                    self._recover(owner_key, token, report)
                    deferred = False
                    while True:
                        if may_defer and not looked and self._defer(owner_key):
                            may_defer, deferred = False, True
                            break
                        looked = False
                        if not self._one_batch(lock, owner_key, token, report):
                            break
                    if deferred and self._let_go(lock):
                        break
                    if lock.release() != "again":
                        break
        except BaseException as exc:
            if isinstance(exc, Exception) and not isinstance(exc, PermanentError):
                # To be retried: marked queued before the lease goes (see ExtractionScheduler).
                with contextlib.suppress(BackendUnavailable):
                    self.scheduler.hold(owner_key)
            lock.abandon()
            raise
        return report

    @staticmethod
    def _let_go(lock: Lease) -> bool:
        """Release the lease after a deferral, the dirty flag notwithstanding:
        what marked it dirty is in the ledger, and the deferred message, already
        sent, learns it with the rest of the batch. Taken at once instead (as
        before), it was a batch of one or two in a backlog, and 0.14 model calls
        a source where full batches make 0.10 (bench_load). Whether it was let
        go: a few sources in a row each mark it dirty again, and then the run
        goes on as without a deferral rather than spin."""
        return any(lock.release() != "again" for _ in range(_LET_GO_TRIES))

    def _defer(self, owner_key: str) -> bool:
        """Micro-batching: wait (by rescheduling, not sleeping) while the owner's
        batch is not full, the owner is still talking and the oldest has not
        waited ``max_wait_ms``. Other triggers (sweep, forget, session end) run now.

        Still talking: a new source within the quiet period or, for an owner
        whose sources come as a stream slower than that (:meth:`_pace_ms`, at
        most a quarter of ``max_wait_ms`` apart), within its gap and as much
        again as the gap exceeds the quiet period (1.5 s for a source a second):
        a steady source a second waits for its batch (up to ``max_wait_ms``)
        instead of going alone after each quiet period. A single source of an
        owner with no stream behind it goes after the quiet period, as before.
        A burst (:meth:`_full_at`: its batch waits for a deep one) stops talking
        sooner: silent for four of its gaps, at most the quiet period."""
        quiet_ms = self.scheduler.delay_ms
        if self.max_wait_ms <= 0 or quiet_ms <= 0:
            return False
        window = self.store.pending_window(owner_key, lookback_ms=2 * self.max_wait_ms)
        if window.count == 0:
            return False
        pace_ms = self._pace_ms(window)
        full = self._full_at(pace_ms)
        if window.count >= full:
            return False
        talking_ms = quiet_ms
        if pace_ms is not None and pace_ms * _STREAM_GAPS_PER_WAIT <= self.max_wait_ms:
            # Silent for a gap, and again as much as the gap is longer than the
            # quiet period: still the quiet period for an owner talking faster.
            talking_ms = max(quiet_ms, math.ceil(2 * pace_ms) - quiet_ms)
        if full > self.batch_size and pace_ms is not None:
            # A burst (waiting for a deep batch) has ended once silent for a few of
            # its gaps: its sources were all there a quiet period sooner.
            talking_ms = max(_RECHECK_MIN_MS, min(talking_ms, math.ceil(_STREAM_GAPS_PER_WAIT * pace_ms)))
        wait_ms = min(talking_ms - window.newest_age_ms, self.max_wait_ms - window.oldest_age_ms)
        if wait_ms <= 0:
            return False
        return self.scheduler.defer(owner_key, min(wait_ms, self._until_full(window, pace_ms, full)))

    def _full_at(self, pace_ms: float | None) -> int:
        """The sources that make the owner's batch full: a deep batch for an owner
        whose sources come fast enough to fill one within ``max_wait_ms`` (a
        burst: a backlog replayed, an import), whose first batch would otherwise
        go at ``batch_size`` and the rest after it, two calls where one will do
        (docs/benchmarks.md); ``batch_size`` for everyone else."""
        deep = self.deep_batch_size
        if deep > self.batch_size and pace_ms is not None and pace_ms * deep <= self.max_wait_ms:
            return deep
        return self.batch_size

    @staticmethod
    def _pace_ms(window: PendingWindow) -> float | None:
        """The mean gap between the owner's latest sources: the pending ones and
        the newest learned before them (so the pace shows from the second
        source of a stream on, and after each batch); None with one source and
        nothing learned lately."""
        previous = window.previous_age_ms
        if previous is not None and previous >= window.oldest_age_ms:
            return (previous - window.newest_age_ms) / window.count
        if window.count >= 2:
            return (window.oldest_age_ms - window.newest_age_ms) / (window.count - 1)
        return None

    def _until_full(self, window: PendingWindow, pace_ms: float | None, full: int) -> int:
        """When the batch should be full at the pace the owner's sources have come
        (never before ``_RECHECK_MIN_MS``): the next look is then, not a whole
        quiet period later, when a burst is about to fill it."""
        if pace_ms is None:
            return self.max_wait_ms
        # The pace so far, but no faster than the silence since the newest says.
        gap_ms = max(pace_ms, window.newest_age_ms)
        return max(_RECHECK_MIN_MS, math.ceil(gap_ms * (full - window.count)))

    def _recover(self, owner_key: str, token: int, report: ExtractReport) -> None:
        """Delete what crashed attempts created and what forgets still owe.

        The token is recorded first: from then on an older holder (cut off from
        Redis, paused) can no longer commit the attempt whose memories are
        about to be deleted.
        """
        self.store.close_abandoned(owner_key, token, ())
        abandoned, owed = self.store.owed(owner_key)
        for attempt_id in abandoned:
            report.recovered += self.engine.delete_attempt(owner_key, attempt_id)
        if abandoned:  # (the token is recorded already)
            self.store.close_abandoned(owner_key, token, abandoned)
        self._settle_tombstones(owner_key, owed)

    def _one_batch(self, lock: Lease, owner_key: str, token: int, report: ExtractReport) -> bool:
        """Learn one batch of the owner's oldest pending sources; whether to take
        another at once."""
        if lock.expired():  # cut off from Redis for a whole lease: another host may hold it
            raise LockLost("the learning lease ran out unconfirmed; no new batch on it")
        # Deep batches for a backlog: fewer, larger calls (the store looks in the same step).
        attempt = self.store.begin_attempt(owner_key, token, self.batch_size, self.deep_batch_size, self.batch_bytes)
        if attempt is None:
            return False
        self.before_batch()  # (the commit confirms the lease: a long wait here is safe)
        report.attempts += 1
        try:
            produced = self.engine.extract(owner_key, attempt.attempt_id, attempt.sources)
            lock.ensure_held()
            result = self.store.commit_attempt(attempt, produced)
        except ModelOutputInvalid as exc:
            self._fail(lock, attempt, exc, report)
            return attempt.more
        except (LockLost, StaleFencingToken) as exc:
            if isinstance(exc, StaleFencingToken):
                lock_hook("learn")("stale_commit")
            # Someone else holds the owner now, and may already have closed this
            # attempt as abandoned: delete what it created (never committed, so
            # safe). A crash right here leaves memories no recall returns.
            try:
                self.engine.delete_attempt(owner_key, attempt.attempt_id)
            except Exception:
                log.warning("could not delete a stale attempt's memories", exc_info=True)
            raise
        except Exception:
            self._undo(attempt)
            raise
        if result.discarded:
            self.engine.delete(owner_key, result.discarded)
            self.store.clear_tombstones(result.discarded)
        report.learned += len(result.learned)
        report.discarded += len(result.discarded)
        # Another batch now only if one was left when this one was taken (or its
        # commit left sources pending): a source remembered since was scheduled
        # after the lease was taken, and comes back by the dirty flag or its run.
        return attempt.more or bool(result.still_pending)

    def _fail(self, lock: Lease, attempt: Attempt, problem: ModelOutputInvalid, report: ExtractReport) -> None:
        """The model answered, but unusably, even when asked again: asking later
        would cost as much and answer the same. Keep nothing of the attempt, and
        end its sources ``failed`` with the reason, so the owner's other batches
        go on and the job ends (no retry). Remembering a source again retries it.

        If a step here fails, the attempt stays open and the sources pending:
        the next holder deletes what it made and tries them again, as after a crash.
        """
        reason = f"{problem.reason}: {problem}"
        self.engine.delete_attempt(attempt.owner_key, attempt.attempt_id)
        lock.ensure_held()
        failed = self.store.fail_attempt(attempt, reason)
        report.failed += len(failed)
        report.failure = reason
        log.warning(
            "extraction batch failed",
            extra={
                "owner_key": attempt.owner_key,
                "reason": problem.reason,
                "detail": str(problem),
                "sources": len(failed),
            },
        )

    def _undo(self, attempt: Attempt) -> None:
        """Best effort after a failed extraction; whatever fails here the next holder redoes."""
        try:
            self.engine.delete_attempt(attempt.owner_key, attempt.attempt_id)
            self.store.abort_attempt(attempt)
        except Exception:
            log.warning("could not undo a failed attempt; the next holder will", exc_info=True)

    # -- forget -------------------------------------------------------------------

    def forget(self, payload: ForgetSource, *, sent_at: datetime) -> bool:
        """Mark the source forgotten at once, then delete every memory derived from it."""
        result = mark_forgotten(self.store, self.scheduler, payload.owner_key, payload.source_id, sent_at=sent_at)
        self._settle_tombstones(payload.owner_key)
        return result.found

    def _settle_tombstones(self, owner_key: str, owed: list[str] | None = None) -> None:
        """Delete the memories whose deletion is owed (``owed``: already read)."""
        if owed is None:
            owed = self.store.tombstones(owner_key)
        if owed:
            self.engine.delete(owner_key, owed)
            self.store.clear_tombstones(owed)

    # -- reads and maintenance -------------------------------------------------------

    def recall(self, owner_key: str, query: str, limit: int) -> list[RecallHit]:
        """Search the owner's memories; only those whose sources are all learned."""
        hits = self.engine.search(owner_key, query, limit * 4 + 10)
        learned = self.store.learned_provenance(owner_key, [h.memory_id for h in hits])
        kept = [RecallHit(h.memory_id, h.text, h.score, learned[h.memory_id]) for h in hits if h.memory_id in learned]
        return kept[:limit]

    def memories(self, owner_key: str) -> list[RecallHit]:
        """Every learned memory of the owner with its sources."""
        learned = self.store.learned_provenance(owner_key)
        return [
            RecallHit(h.memory_id, h.text, None, learned[h.memory_id])
            for h in self.engine.list(owner_key)
            if h.memory_id in learned
        ]
