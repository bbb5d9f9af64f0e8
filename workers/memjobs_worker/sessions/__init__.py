"""Session end: consolidation into USER.md / MEMORY.md, the digest, recall.

At session end the consolidation job proposes grounded patches to the Markdown
memory and the digest job (off by default: ``QWEN_AUDIO_SESSION_DIGEST=on``)
keeps a topic, a gist of at most 50 characters and the goals of the tasks
dispatched, for 90 days; recall reads them on demand ("what did we talk about
the other day") with each task's status read live from the task ledger.
Digests are never injected into instructions. Each job runs once per
(owner, session) (:mod:`~memjobs_worker.sessions.runs`, :mod:`~memjobs_worker.sessions.jobs`).

The names below are imported on first use (PEP 562): the tables and the
store (the migrations' schema, ``memjobs forget``) do not load the model client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memjobs_worker.lazy import lazy_exports

if TYPE_CHECKING:
    from memjobs_worker.model_client import ChatModel
    from memjobs_worker.sessions.digest import (
        MAX_GIST_CHARS,
        MAX_TOPIC_CHARS,
        Digest,
        digest_session,
    )
    from memjobs_worker.sessions.jobs import redact_payload, run_consolidation, run_digest
    from memjobs_worker.sessions.prompting import ModelOutputInvalid
    from memjobs_worker.sessions.runs import RunClaim, RunKind, RunLedger, RunRecord
    from memjobs_worker.sessions.store import (
        DIGEST_RETENTION_DAYS,
        TASK_RETENTION_DAYS,
        RecalledTask,
        RetentionReport,
        SessionRecall,
        SessionStore,
    )

__all__ = [
    # the jobs
    "Digest",
    "ChatModel",
    "digest_session",
    "run_consolidation",
    "run_digest",
    "redact_payload",
    "MAX_GIST_CHARS",
    "MAX_TOPIC_CHARS",
    # errors
    "ModelOutputInvalid",
    # runs
    "RunClaim",
    "RunKind",
    "RunLedger",
    "RunRecord",
    # storage, recall and retention
    "SessionStore",
    "SessionRecall",
    "RecalledTask",
    "RetentionReport",
    "DIGEST_RETENTION_DAYS",
    "TASK_RETENTION_DAYS",
]

_HOME = {
    "ChatModel": "memjobs_worker.model_client",
    "MAX_GIST_CHARS": "memjobs_worker.sessions.digest",
    "MAX_TOPIC_CHARS": "memjobs_worker.sessions.digest",
    "Digest": "memjobs_worker.sessions.digest",
    "digest_session": "memjobs_worker.sessions.digest",
    "redact_payload": "memjobs_worker.sessions.jobs",
    "run_consolidation": "memjobs_worker.sessions.jobs",
    "run_digest": "memjobs_worker.sessions.jobs",
    "ModelOutputInvalid": "memjobs_worker.sessions.prompting",
    "RunClaim": "memjobs_worker.sessions.runs",
    "RunKind": "memjobs_worker.sessions.runs",
    "RunLedger": "memjobs_worker.sessions.runs",
    "RunRecord": "memjobs_worker.sessions.runs",
    "DIGEST_RETENTION_DAYS": "memjobs_worker.sessions.store",
    "TASK_RETENTION_DAYS": "memjobs_worker.sessions.store",
    "RecalledTask": "memjobs_worker.sessions.store",
    "RetentionReport": "memjobs_worker.sessions.store",
    "SessionRecall": "memjobs_worker.sessions.store",
    "SessionStore": "memjobs_worker.sessions.store",
}


__getattr__ = lazy_exports(__name__, _HOME, globals())
