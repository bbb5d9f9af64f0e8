"""Session end's actors: consolidate_session, digest_session, record_task.

Each validates its message, checks its switch on this worker (producers queue
session-end work by default and the workers decide: switched off, or no model
configured, the job is skipped and counted as ``switched_off`` / ``no_model``,
not failed) and calls the sessions package; the job logic
is in :mod:`~memjobs_worker.sessions.consolidation` and
:mod:`~memjobs_worker.sessions.digest`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import dramatiq

from memjobs_client import contracts
from memjobs_worker.jobs import Actors, declare, parse, report
from memjobs_worker.model_client import ChatModel
from memjobs_worker.sessions import run_consolidation, run_digest
from memjobs_worker.sessions.jobs import settle
from memjobs_worker.sessions.memory_docs import AuditTrail, MemoryService
from memjobs_worker.sessions.store import SessionStore
from memjobs_worker.settings import Settings


def declare_session_actors(
    broker: dramatiq.Broker,
    settings: Settings,
    *,
    store: Callable[[], SessionStore],
    chat: Callable[[str], ChatModel | None],
    memory_docs: Callable[[], MemoryService],
    audit: Callable[[], AuditTrail],
) -> Actors:
    """Register the session-end actors; the callables return their parts, built on first use."""
    rules = settings.source_rules()
    lease = timedelta(milliseconds=settings.lease_ms)

    def consolidate_session(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.ConsolidateSession, args, kwargs, rules)
        if settings.memory_auto == "off":
            report("switched_off")  # QWEN_AUDIO_MEMORY_AUTO=off on this worker: skipped, not failed
            return
        model = chat("consolidate")
        if not settings.consolidation_enabled or model is None:
            report("no_model")  # no model configured on this worker: skipped, not failed
            return
        report(settle(broker, lease, run_consolidation(
            store(), payload, lease=lease, model=model, service=memory_docs(), audit=audit(),
            max_patches=settings.max_patches_per_session, max_patch_chars=settings.max_patch_chars)))

    def digest_session(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.DigestSession, args, kwargs, rules)
        if settings.session_digest == "off":
            report("switched_off")  # QWEN_AUDIO_SESSION_DIGEST is off on this worker
            return
        model = chat("digest")
        if not settings.digest_enabled or model is None:
            report("no_model")
            return
        report(settle(broker, lease, run_digest(store(), model, payload, lease=lease)))

    def record_task(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.RecordTask, args, kwargs, rules)
        store().record_task(payload.owner_key, payload.task_id, payload.goal, payload.status)
        report("recorded")

    return declare(broker, settings, [
        (contracts.ACTOR_CONSOLIDATE, consolidate_session, {}),
        (contracts.ACTOR_DIGEST, digest_session, {}),
        (contracts.ACTOR_RECORD_TASK, record_task, {}),
    ])
