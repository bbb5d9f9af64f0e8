"""memjobs producers: validate and enqueue memory jobs from a gateway.

Light on purpose: importing this package pulls in Dramatiq's Redis broker and
pydantic, never mem0, an LLM client or SQLAlchemy.
"""

from memjobs_client.blackboard import SessionBlackboard
from memjobs_client.client import ForgetOutcome, MemjobsClient
from memjobs_client.contracts import (
    SCHEMA_VERSION,
    ExtractFacts,
    ForgetSource,
    RememberSource,
    owner_key,
    source_id_for,
)
from memjobs_client.errors import (
    BackendUnavailable,
    ConfigurationError,
    FeatureOff,
    InvalidPayload,
    KnowledgeOff,
    LockLost,
    MemjobsError,
    MemoryOff,
    ModelUnavailable,
    PermanentError,
    RedisFull,
    SensitiveContent,
    StaleFencingToken,
    TransientError,
)
from memjobs_client.sensitive import ensure_not_sensitive, find_sensitive_path, find_sensitive_text

__all__ = [
    # client
    "ForgetOutcome",
    "MemjobsClient",
    "SessionBlackboard",
    # contracts
    "SCHEMA_VERSION",
    "ExtractFacts",
    "ForgetSource",
    "RememberSource",
    "owner_key",
    "source_id_for",
    # sensitive-content check
    "ensure_not_sensitive",
    "find_sensitive_path",
    "find_sensitive_text",
    # errors
    "BackendUnavailable",
    "ConfigurationError",
    "FeatureOff",
    "InvalidPayload",
    "KnowledgeOff",
    "LockLost",
    "MemjobsError",
    "MemoryOff",
    "ModelUnavailable",
    "PermanentError",
    "RedisFull",
    "SensitiveContent",
    "StaleFencingToken",
    "TransientError",
]
