"""Personal memory's actors: remember_source, extract_facts, forget_source.

Each validates its message (:func:`memjobs_worker.jobs.parse`), calls the
pipeline and reports how the job ended; the domain is in
:mod:`memjobs_worker.memory.pipeline`.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import dramatiq
from dramatiq.middleware import Retries

from memjobs_client import contracts
from memjobs_client.errors import ModelUnavailable, StaleFencingToken
from memjobs_worker.grouped import Grouped
from memjobs_worker.jobs import Actors, declare, parse, report, sent_at
from memjobs_worker.memory.build import MemoryParts, ensure_memory_on
from memjobs_worker.memory.intake import remember_many
from memjobs_worker.memory.marker import ClearMarkerOnDeadLetter
from memjobs_worker.memory.store.base import AddOutcome
from memjobs_worker.model_output import ModelOutputInvalid
from memjobs_worker.observability.metrics import WRITTEN_TOGETHER
from memjobs_worker.settings import MemorySettings, WorkerSettings

log = logging.getLogger(__name__)


def declare_memory_actors(
    broker: dramatiq.Broker,
    memory: MemorySettings,
    workers: WorkerSettings,
    *,
    rules: contracts.SourceRules,
    parts: MemoryParts,
) -> Actors:
    """Register the personal-memory actors; each reads the parts it uses from
    ``parts`` when it runs (``remember_source`` the ledger and the scheduler
    alone). ``forget_source`` first asks whether the owner sent the source (in
    the ledger, or its remember queued:
    :meth:`memjobs_worker.memory.service.PersonalMemory.was_sent`)."""

    # The remembers the pool's threads run at the same time go to the ledger
    # in one statement and to Redis in one round trip (a group commit).
    remembering: Grouped[tuple[contracts.RememberSource, datetime], AddOutcome] = Grouped(
        lambda requests: remember_many(parts.store, parts.scheduler, requests),
        on_batch=WRITTEN_TOGETHER.labels("remembers").observe,
    )

    def remember_source(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.RememberSource, args, kwargs, rules)
        ensure_memory_on(memory)  # the ledger and scheduler alone would not say so
        report(remembering((payload, sent_at())))

    def extract_facts(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.ExtractFacts, args, kwargs, rules)
        if parts.model_waiting():
            # Not started (no lease, no attempt): retried on the outage budget, the
            # owner still marked queued, so neither remember nor the sweeper adds one.
            parts.scheduler.hold(payload.owner_key)
            raise ModelUnavailable(
                "extraction not started: a model service's circuit breaker is open", reason="model_circuit_open"
            )
        try:
            done = parts.pipeline.extract(payload)
        except StaleFencingToken:
            report("stale_commit_refused")  # a newer holder owns the work now
            return
        # The key's first characters (as dead letters show it): never the whole key,
        # which an owner's erasure must leave in no log (docs/data-lifecycle.md).
        log.info(
            "extraction",
            extra={
                "owner": payload.owner_key[:12],
                "outcome": done.outcome,
                "attempts": done.attempts,
                "learned": done.learned,
                "discarded": done.discarded,
                "recovered": done.recovered,
                "failed": done.failed,
            },
        )
        if done.failed:
            # The job ends (no retry); its sources are failed with the reason in the ledger.
            report(ModelOutputInvalid.reason)
            return
        report({"busy": "skipped_busy", "deferred": "deferred"}.get(done.outcome, "succeeded"))

    def forget_source(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.ForgetSource, args, kwargs, rules)
        if not parts.personal_memory.was_sent(payload.owner_key, payload.source_id):
            report("not_found")  # a producer's forget of a source never sent: nothing written
            return
        found = parts.pipeline.forget(payload, sent_at=sent_at())
        report("forgotten" if found else "forgotten_unknown")

    # Before Retries: it looks once Retries has decided retry or dead letter.
    broker.add_middleware(ClearMarkerOnDeadLetter(lambda: parts.scheduler), before=Retries)
    return declare(
        broker,
        workers,
        [
            (contracts.ACTOR_REMEMBER, remember_source, {}),
            (contracts.ACTOR_EXTRACT, extract_facts, {"time_limit": 3_600_000}),
            (contracts.ACTOR_FORGET, forget_source, {}),
        ],
    )
