"""A stored Dramatiq message as the console lists and shows it: no text.

:func:`job_of` decodes what :func:`memjobs_worker.broker.page_messages` read
into a :class:`Job`: ids, queue, state, actor, attempts, the failure record's
reason and times (:mod:`memjobs_worker.observability.failures`), when it was
enqueued and when it is due, and the first characters of the owner *key*.
Never the payload's text or the owner id: :func:`payload_outline` keeps the
ids and enumerations of :data:`~memjobs_worker.ops.deadletters.SAFE_FIELDS`
and replaces every other string by its length.

:func:`matches` is the console's search: a message id or broker id prefix, an
actor name, or an owner-key prefix; it never looks at the payload's text, so a
search cannot be used to probe what a user said.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memjobs_worker.observability.failures import REPLAYS_OPTION, failure_record
from memjobs_worker.ops.deadletters import OWNER_PREFIX_CHARS, redact

#: A search term is at least this long (a shorter prefix matches nearly everything).
MIN_TERM = 3


@dataclass(frozen=True)
class Job:
    message_id: str
    redis_id: str
    queue: str
    state: str
    actor: str
    attempts: int
    reason: str | None
    enqueued_at: datetime | None
    due_at: datetime | None
    first_failed_at: datetime | None
    last_failed_at: datetime | None
    owner: str | None
    replays: int
    schema_version: int | None
    payload: dict[str, Any] | None  # outlined: no text

    @property
    def decodable(self) -> bool:
        return self.payload is not None


def at_ms(ms: Any) -> datetime | None:
    return datetime.fromtimestamp(float(ms) / 1000, UTC) if isinstance(ms, int | float) and ms else None


def job_of(queue: str, state: str, redis_id: str, data: bytes, score: float | None = None) -> Job:
    """The listing of one stored message (``score``: a dead letter's death, epoch ms)."""
    try:
        message = json.loads(data)
    except ValueError:
        message = None
    if not isinstance(message, dict):
        return Job(
            "?",
            redis_id,
            queue,
            state,
            "?",
            0,
            "undecodable_message",
            None,
            None,
            None,
            at_ms(score),
            None,
            0,
            None,
            None,
        )
    raw_options = message.get("options")
    options: dict[str, Any] = raw_options if isinstance(raw_options, dict) else {}
    record = failure_record(options)
    args = message.get("args")
    payload = args[0] if isinstance(args, list) and len(args) == 1 and isinstance(args[0], dict) else {}
    key = payload.get("owner_key")
    retries = int(options.get("retries") or 0)
    version = payload.get("schema_version")
    return Job(
        message_id=str(message.get("message_id", "?")),
        redis_id=redis_id,
        queue=queue,
        state=state,
        actor=str(message.get("actor_name", "?")),
        attempts=int(record.get("attempts") or (retries + 1 if retries or state == "dead" else 0)),
        reason=str(record["reason"]) if record.get("reason") else None,
        enqueued_at=at_ms(message.get("message_timestamp")),
        due_at=at_ms(options.get("eta")),
        first_failed_at=at_ms(record.get("first_ms")),
        last_failed_at=at_ms(score) if score is not None else at_ms(record.get("last_ms")),
        owner=key[:OWNER_PREFIX_CHARS] if isinstance(key, str) else None,
        replays=int(options.get(REPLAYS_OPTION) or 0),
        schema_version=version if isinstance(version, int) else None,
        payload=payload_outline(payload),
    )


def payload_outline(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with every text replaced by its length (ids and enumerations kept)
    and the owner key shortened; the owner id, were it there, is text."""
    outlined: dict[str, Any] = redact(payload)
    return outlined


def matches(job: Job, term: str) -> bool:
    """Whether ``term`` names this job: a prefix of its message id, broker id or owner
    key, or its actor's name (or a part of it). Case-insensitive; terms shorter than
    :data:`MIN_TERM` match nothing."""
    term = term.strip().lower()
    if len(term) < MIN_TERM:
        return False
    owner = (job.owner or "").lower()  # its first characters only: a longer key compares those
    return (
        job.message_id.lower().startswith(term)
        or job.redis_id.lower().startswith(term)
        or (owner != "" and owner.startswith(term[:OWNER_PREFIX_CHARS]))
        or term in job.actor.lower()
    )
