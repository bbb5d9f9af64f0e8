"""Job contracts: the one package both producers and workers import.

A contract is a queue name, an actor name and a pydantic payload model with a
schema version. Producers build payloads with these models; workers validate
every message against the same models, so a message that does not fit is
refused at either end with the same words.

Owner ids never travel: a payload carries ``owner_key = sha256(owner_id)``,
so Redis, logs and metrics never see the raw id.

What a valid source is — its byte cap and the credential check — is one rule,
here: :class:`SourceRules` is the pydantic validation context both ends pass
to :func:`~memjobs_client.validation.validate`.  Every text-bearing field is
real text (no lone surrogate, no NUL); ids, a remembered text, a document's
text, title and path are refused when they carry a credential; a task's goal
keeps its words with the secret blanked out.

One module per feature (:mod:`.memory`, :mod:`.sessions`, :mod:`.blackboard`, :mod:`.knowledge`)
over :mod:`.base`; every name is re-exported here.
"""

from __future__ import annotations

from memjobs_client.contracts.base import (
    ACTOR_APPEND_BLACKBOARD,
    ACTOR_CONSOLIDATE,
    ACTOR_DIGEST,
    ACTOR_EXTRACT,
    ACTOR_FORGET,
    ACTOR_RECORD_TASK,
    ACTOR_REINDEX,
    ACTOR_REMEMBER,
    CHEAP_QUEUES,
    DEFAULT_MAX_KNOWLEDGE_DOC_CHARS,
    DEFAULT_MAX_TEXT_BYTES,
    DEFAULT_MAX_TRANSCRIPT_BYTES,
    MAX_CORPUS_DOCUMENTS,
    MAX_CORPUS_PARTS,
    MAX_TASKS,
    MAX_TURNS,
    MODEL_QUEUES,
    QUEUE_EXTRACT,
    QUEUE_FORGET,
    QUEUE_KNOWLEDGE,
    QUEUE_REMEMBER,
    QUEUE_SESSION,
    QUEUE_TASKS,
    QUEUES,
    SCHEMA_VERSION,
    TERMINAL_TASK_STATUSES,
    SourceKind,
    SourceRules,
    TaskStatus,
    _Payload,
    content_hash,
    normalize_text,
    owner_key,
    source_id_for,
)
from memjobs_client.contracts.blackboard import (
    BLACKBOARD_MAX_BYTES,
    BLACKBOARD_MAX_ENTRIES,
    BLACKBOARD_RETENTION_DAYS,
    MAX_BLACKBOARD_APPEND,
    MAX_BLACKBOARD_EVIDENCE,
    MAX_BLACKBOARD_RESULT_BYTES,
    AppendBlackboard,
    BlackboardEntry,
)
from memjobs_client.contracts.knowledge import (
    CorpusPart,
    Document,
    KnowledgePath,
    KnowledgeRefusal,
    KnowledgeText,
    ReindexKnowledge,
    knowledge_path_id,
)
from memjobs_client.contracts.memory import (
    ExtractFacts,
    ForgetSource,
    RememberSource,
)
from memjobs_client.contracts.sessions import (
    ConsolidateSession,
    DigestSession,
    RecordTask,
    TaskRef,
    Turn,
)

PAYLOADS: dict[str, type[_Payload]] = {
    ACTOR_REMEMBER: RememberSource,
    ACTOR_EXTRACT: ExtractFacts,
    ACTOR_FORGET: ForgetSource,
    ACTOR_CONSOLIDATE: ConsolidateSession,
    ACTOR_DIGEST: DigestSession,
    ACTOR_RECORD_TASK: RecordTask,
    ACTOR_REINDEX: ReindexKnowledge,
    ACTOR_APPEND_BLACKBOARD: AppendBlackboard,
}
QUEUE_OF: dict[str, str] = {
    ACTOR_REMEMBER: QUEUE_REMEMBER,
    ACTOR_EXTRACT: QUEUE_EXTRACT,
    ACTOR_FORGET: QUEUE_FORGET,
    ACTOR_CONSOLIDATE: QUEUE_SESSION,
    ACTOR_DIGEST: QUEUE_SESSION,
    ACTOR_RECORD_TASK: QUEUE_TASKS,
    ACTOR_REINDEX: QUEUE_KNOWLEDGE,
    ACTOR_APPEND_BLACKBOARD: QUEUE_TASKS,
}

__all__ = [
    "ACTOR_APPEND_BLACKBOARD",
    "ACTOR_CONSOLIDATE",
    "AppendBlackboard",
    "BLACKBOARD_MAX_BYTES",
    "BLACKBOARD_MAX_ENTRIES",
    "BLACKBOARD_RETENTION_DAYS",
    "BlackboardEntry",
    "MAX_BLACKBOARD_APPEND",
    "MAX_BLACKBOARD_EVIDENCE",
    "MAX_BLACKBOARD_RESULT_BYTES",
    "ACTOR_DIGEST",
    "ACTOR_EXTRACT",
    "ACTOR_FORGET",
    "ACTOR_RECORD_TASK",
    "ACTOR_REINDEX",
    "ACTOR_REMEMBER",
    "CHEAP_QUEUES",
    "ConsolidateSession",
    "CorpusPart",
    "DEFAULT_MAX_KNOWLEDGE_DOC_CHARS",
    "DEFAULT_MAX_TEXT_BYTES",
    "DEFAULT_MAX_TRANSCRIPT_BYTES",
    "DigestSession",
    "Document",
    "ExtractFacts",
    "ForgetSource",
    "KnowledgePath",
    "KnowledgeRefusal",
    "KnowledgeText",
    "MAX_CORPUS_DOCUMENTS",
    "MAX_CORPUS_PARTS",
    "MAX_TASKS",
    "MAX_TURNS",
    "MODEL_QUEUES",
    "PAYLOADS",
    "QUEUES",
    "QUEUE_EXTRACT",
    "QUEUE_FORGET",
    "QUEUE_KNOWLEDGE",
    "QUEUE_OF",
    "QUEUE_REMEMBER",
    "QUEUE_SESSION",
    "QUEUE_TASKS",
    "RecordTask",
    "ReindexKnowledge",
    "RememberSource",
    "SCHEMA_VERSION",
    "SourceKind",
    "SourceRules",
    "TERMINAL_TASK_STATUSES",
    "TaskRef",
    "TaskStatus",
    "Turn",
    "_Payload",
    "content_hash",
    "knowledge_path_id",
    "normalize_text",
    "owner_key",
    "source_id_for",
]
