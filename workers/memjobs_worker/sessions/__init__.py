"""Session end: consolidation into USER.md / MEMORY.md, the digest, recall.

At session end the consolidation job proposes grounded patches to the Markdown
memory and the digest job (off by default: ``QWEN_AUDIO_SESSION_DIGEST=on``)
keeps a topic, a gist of at most 50 characters and the goals of the tasks
dispatched, for 90 days; recall reads them on demand ("what did we talk about
the other day") with each task's status read live from the task ledger.
Digests are never injected into instructions. Each job runs once per
(owner, session) (:mod:`~memjobs_worker.sessions.runs`, :mod:`~memjobs_worker.sessions.jobs`).
"""

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
