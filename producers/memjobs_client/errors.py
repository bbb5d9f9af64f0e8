"""The memjobs error tree, shared by producers and workers.

    MemjobsError
    ├── TransientError            worth retrying: the world may be better later
    │   ├── BackendUnavailable    Redis or the state store did not answer
    │   ├── ModelUnavailable      the model or embedding service failed (5xx, 429, timeout)
    │   └── LockLost              the learning lease expired or was taken over
    └── PermanentError            retrying cannot help: dead-letter or refuse at once
        ├── InvalidPayload        a payload failed validation (also raised at the producer)
        ├── SensitiveContent      content or a path looks like a credential
        ├── MemoryOff             personal memory is switched off
        ├── StaleFencingToken     a commit carried a token older than the newest seen
        └── ConfigurationError    settings that cannot work (also at start-up)

Every error carries a short machine-readable ``reason`` so that logs, metrics
and CLI output can say why without repeating user text.
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


class ModelUnavailable(TransientError):
    """The model or embedding service failed in a way worth retrying."""

    reason = "model_unavailable"


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
    """Content or a path looks like a credential: refused, never stored."""

    reason = "sensitive_content"


class MemoryOff(PermanentError):
    """Personal memory is switched off (``NOVA_AUDIO_AGENT_MEMORY_PROVIDER=off``)."""

    reason = "memory_off"


class StaleFencingToken(PermanentError):
    """A ledger commit carried a fencing token older than the newest seen."""

    reason = "stale_fencing_token"


class ConfigurationError(PermanentError):
    """Settings that cannot work; raised at start-up with what to change."""

    reason = "configuration"
