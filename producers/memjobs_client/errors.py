"""The memjobs error tree, shared by producers and workers.

    MemjobsError
    ├── TransientError            worth retrying: the world may be better later
    │   ├── BackendUnavailable    Redis or the state store did not answer
    │   │   └── RedisFull         Redis is at its memory limit: new jobs refused for now
    │   ├── ModelUnavailable      the model or embedding service failed (5xx, 429, timeout,
    │   │                         its breaker open; reason model_rejected: another 4xx)
    │   └── LockLost              the learning lease expired or was taken over
    └── PermanentError            retrying cannot help: dead-letter or refuse at once
        ├── InvalidPayload        a payload failed validation (also raised at the producer)
        ├── SensitiveContent      content or a path looks like a credential
        ├── FeatureOff            a feature is switched off by its setting: refused, nothing allocated
        │   ├── MemoryOff         personal memory (NOVA_AUDIO_AGENT_MEMORY_PROVIDER=off)
        │   └── KnowledgeOff      knowledge (MEMJOBS_KNOWLEDGE=off); also a ConfigurationError
        ├── StaleFencingToken     a commit carried a token older than the newest seen
        └── ConfigurationError    settings that cannot work (also at start-up)

Every error carries a short machine-readable ``reason`` so that logs, metrics
and CLI output can say why without repeating user text. A feature-off error
says its own message (``MemoryOff()``): the words are written once, here, and
every door (the producer client, the CLI, the HTTP API, the workers) says the
same thing. ``KnowledgeOff`` is also a ``ConfigurationError``: a command that
needs knowledge cannot work on these settings (the CLI's exit 3).
"""

from __future__ import annotations


class MemjobsError(Exception):
    """Root of every error memjobs raises on purpose."""

    reason: str = "error"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class TransientError(MemjobsError):
    """A failure that a later attempt may not meet: retried with backoff."""

    reason = "transient"


class BackendUnavailable(TransientError):
    """Redis or the state store could not be reached."""

    reason = "backend_unavailable"


class RedisFull(BackendUnavailable):
    """Redis is (nearly) at its ``maxmemory``: a new job is refused, nothing is
    queued, and the same call succeeds once the workers have drained the queues."""

    reason = "redis_full"


class ModelUnavailable(TransientError):
    """The model or embedding service failed in a way worth retrying.

    Reasons: ``model_unavailable`` (unreachable, timed out, 429 or 5xx) and
    ``model_circuit_open`` (not called: its breaker is open) are an outage,
    retried on the outage time budget; ``model_rejected`` (another 4xx: a bad
    key, a refused request) is the job's own failure, retried by count."""

    reason = "model_unavailable"
    #: The reason of a request the service refused (4xx but 429): not an outage.
    REJECTED = "model_rejected"


class LockLost(TransientError):
    """The learning lease could not be renewed: stop before committing."""

    reason = "lock_lost"


class PermanentError(MemjobsError):
    """A failure no retry can fix."""

    reason = "permanent"


class InvalidPayload(PermanentError):
    """A payload or argument failed validation."""

    reason = "invalid_payload"


class SensitiveContent(PermanentError):
    """Content or a path looks like a credential: refused, never stored.

    The message says what was refused in the caller's terms (the field and the
    kind of credential, never the value); ``rule`` names the detector rule that
    matched, for logs and tests (None when not known).
    """

    reason = "sensitive_content"

    def __init__(self, message: str, *, reason: str | None = None, rule: str | None = None) -> None:
        super().__init__(message, reason=reason)
        self.rule = rule


class FeatureOff(PermanentError):
    """A feature switched off by its setting: its calls are refused and nothing
    of it is allocated. Subclasses carry their own message and reason."""

    reason = "feature_off"
    #: What the refusal says (a subclass names its feature and setting).
    message = "this feature is switched off"

    def __init__(self, message: str | None = None, *, reason: str | None = None) -> None:
        super().__init__(message or self.message, reason=reason)


class MemoryOff(FeatureOff):
    """Personal memory is switched off (``NOVA_AUDIO_AGENT_MEMORY_PROVIDER=off``)."""

    reason = "memory_off"
    message = "personal memory is off (NOVA_AUDIO_AGENT_MEMORY_PROVIDER=off)"


class StaleFencingToken(PermanentError):
    """A ledger commit carried a fencing token older than the newest seen."""

    reason = "stale_fencing_token"


class ConfigurationError(PermanentError):
    """Settings that cannot work; raised at start-up with what to change."""

    reason = "configuration"


class KnowledgeOff(FeatureOff, ConfigurationError):
    """Knowledge is switched off (``MEMJOBS_KNOWLEDGE=off``): reindex and search are refused."""

    reason = "knowledge_off"
    message = "knowledge is off (MEMJOBS_KNOWLEDGE=off)"
