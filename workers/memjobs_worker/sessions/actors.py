"""Session end's actors: consolidate_session, digest_session, record_task, and
append_blackboard (a session's L0 blackboard entries).

Each validates its message, checks its switch on this worker (producers queue
session-end work by default and the workers decide: switched off, or no model
configured, the job is skipped and counted as ``switched_off`` / ``no_model``,
not failed, and its run ends ``skipped`` with that reason) and calls the
sessions package; a dead-lettered message ends its run
(:class:`~memjobs_worker.sessions.endings.EndRunsOnDeadLetter`); the job logic
is in :mod:`~memjobs_worker.sessions.consolidation` and
:mod:`~memjobs_worker.sessions.digest`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import dramatiq

from memjobs_client import contracts
from memjobs_worker.jobs import Actors, declare, parse, report
from memjobs_worker.sessions import run_consolidation, run_digest
from memjobs_worker.sessions.build import SessionParts
from memjobs_worker.sessions.endings import EndRunsOnDeadLetter
from memjobs_worker.sessions.jobs import settle, skip
from memjobs_worker.settings import SessionSettings, WorkerSettings

if TYPE_CHECKING:
    from memjobs_worker.model_client import ChatModel
    from memjobs_worker.sessions.runs import RunKind


def declare_session_actors(
    broker: dramatiq.Broker,
    sessions: SessionSettings,
    workers: WorkerSettings,
    *,
    rules: contracts.SourceRules,
    lease_ms: int,
    parts: SessionParts,
) -> Actors:
    """Register the session-end actors on ``parts`` (built when a job first reads them);
    a run is held under a lease of ``lease_ms``."""
    lease = timedelta(milliseconds=lease_ms)

    def chat_for(
        kind: RunKind, switch: str, payload: contracts.ConsolidateSession | contracts.DigestSession
    ) -> ChatModel | None:
        """The light model for ``kind``, or None once the run is skipped: switched off
        (QWEN_AUDIO_MEMORY_AUTO / QWEN_AUDIO_SESSION_DIGEST), or no model configured on
        this worker (skipped, not failed, and the run ends skipped with that reason)."""
        model = parts.chat(kind) if switch != "off" else None
        if model is None:
            why = "switched_off" if switch == "off" else "no_model"
            report(settle(broker, lease, skip(parts.sessions.runs, payload.owner_key, payload.session_id, kind, why)))
        return model

    def consolidate_session(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.ConsolidateSession, args, kwargs, rules)
        model = chat_for("consolidate", sessions.memory_auto, payload)
        if model is None:
            return
        report(
            settle(
                broker,
                lease,
                run_consolidation(
                    parts.sessions,
                    payload,
                    lease=lease,
                    model=model,
                    service=parts.memory_docs,
                    audit=parts.audit,
                    max_patches=sessions.max_patches_per_session,
                    max_patch_chars=sessions.max_patch_chars,
                ),
            )
        )

    def digest_session(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.DigestSession, args, kwargs, rules)
        model = chat_for("digest", sessions.session_digest, payload)
        if model is None:
            return
        report(settle(broker, lease, run_digest(parts.sessions, model, payload, lease=lease)))

    def record_task(*args: Any, **kwargs: Any) -> None:
        payload = parse(contracts.RecordTask, args, kwargs, rules)
        parts.sessions.record_task(payload.owner_key, payload.task_id, payload.goal, payload.status)
        report("recorded")

    def append_blackboard(*args: Any, **kwargs: Any) -> None:
        # Idempotent by entry id, applied in event order on read: a redelivery or a
        # late message changes nothing it should not; the limits trim the oldest.
        payload = parse(contracts.AppendBlackboard, args, kwargs, rules)
        done = parts.blackboard.append(payload.owner_key, payload.session_id, payload.entries)
        report("appended" if done.added else "duplicate")

    # A dead-lettered session message ends its run (failed, with the failure's reason).
    if not any(isinstance(m, EndRunsOnDeadLetter) for m in broker.middleware):
        broker.add_middleware(EndRunsOnDeadLetter(lambda: parts.sessions.runs))
    return declare(
        broker,
        workers,
        [
            (contracts.ACTOR_CONSOLIDATE, consolidate_session, {}),
            (contracts.ACTOR_DIGEST, digest_session, {}),
            (contracts.ACTOR_RECORD_TASK, record_task, {}),
            (contracts.ACTOR_APPEND_BLACKBOARD, append_blackboard, {}),
        ],
    )
