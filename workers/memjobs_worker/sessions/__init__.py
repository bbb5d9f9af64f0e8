"""Session digest and recall (off by default: ``QWEN_AUDIO_SESSION_DIGEST=on``).

At session end the digest job keeps a topic, a gist of at most 50 characters
and the goals of the tasks dispatched, for 90 days; recall reads them on demand
("what did we talk about the other day") with each task's status read live
from the task ledger. Digests are never injected into instructions.
"""

from memjobs_worker.sessions.digest import (
    MAX_GIST_CHARS,
    MAX_TOPIC_CHARS,
    Digest,
    ModelOutputInvalid,
    TextModel,
    digest_session,
    run_digest,
)
from memjobs_worker.sessions.store import (
    DIGEST_RETENTION_DAYS,
    TASK_RETENTION_DAYS,
    RecalledTask,
    RetentionReport,
    RunKind,
    SessionRecall,
    SessionStore,
)

__all__ = [
    # the digest job
    "Digest",
    "TextModel",
    "digest_session",
    "run_digest",
    "MAX_GIST_CHARS",
    "MAX_TOPIC_CHARS",
    # errors
    "ModelOutputInvalid",
    # storage, recall and retention
    "SessionStore",
    "SessionRecall",
    "RecalledTask",
    "RetentionReport",
    "RunKind",
    "DIGEST_RETENTION_DAYS",
    "TASK_RETENTION_DAYS",
]
