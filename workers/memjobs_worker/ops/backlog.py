"""What is left to do, read from the messages Redis holds: which jobs are
retrying and why, and whether any job of one owner is still queued. For
reports only: a forget decides on the owner's queued-remember count
(:mod:`memjobs_worker.memory.queued`), never on this bounded scan.

Dramatiq's Redis broker keeps every message not yet acknowledged — ready,
delayed or in flight — in the hash ``<namespace>:<queue>.msgs`` (delayed ones
in ``<queue>.DQ.msgs``); a retried message carries ``options.retries`` and the
traceback of its last failure. Only the actor, the message id, the retry
count and the last line of that traceback (redacted, shortened) are shown:
never the payload, which may carry text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis
from dramatiq.common import dq_name

from memjobs_client import keys
from memjobs_client.contracts import QUEUES
from memjobs_client.errors import BackendUnavailable
from memjobs_worker.logs import redact_text

#: Messages read per hash at most (a drain report, not an inventory).
SCAN_LIMIT = 2000
REASON_CHARS = 200


@dataclass(frozen=True)
class Retrying:
    queue: str
    actor: str
    message_id: str
    retries: int
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "actor": self.actor, "message_id": self.message_id,
                "retries": self.retries, "reason": self.reason}


def _raw_messages(client: redis.Redis) -> Iterator[tuple[str, bytes]]:
    for queue in QUEUES:
        for name in (queue, dq_name(queue)):
            for seen, (_mid, raw) in enumerate(client.hscan_iter(keys.messages(name), count=500)):
                if seen >= SCAN_LIMIT:
                    break
                yield queue, raw


def _reason(traceback_text: str) -> str:
    lines = [line for line in traceback_text.strip().splitlines() if line.strip()]
    last = lines[-1].strip() if lines else "unknown"
    last = redact_text(last)
    return last if len(last) <= REASON_CHARS else last[: REASON_CHARS - 1] + "…"


def retrying(client: redis.Redis) -> list[Retrying]:
    """Messages that failed at least once and wait for (or are in) a retry."""
    found: list[Retrying] = []
    try:
        for queue, raw in _raw_messages(client):
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            options = message.get("options") or {}
            retries = int(options.get("retries") or 0)
            if retries < 1:
                continue
            found.append(Retrying(queue, str(message.get("actor_name", "?")),
                                  str(message.get("message_id", "?")), retries,
                                  _reason(str(options.get("traceback") or ""))))
    except redis.RedisError as exc:
        raise BackendUnavailable(f"Redis did not answer: {exc}") from exc
    return found


def owner_has_messages(client: redis.Redis, owner_key: str) -> bool:
    """Whether any unacknowledged message names this owner (its sha256 key)."""
    return _any_message_names(client, owner_key)


def _any_message_names(client: redis.Redis, value: str) -> bool:
    needle = value.encode()
    try:
        return any(needle in raw for _queue, raw in _raw_messages(client))
    except redis.RedisError as exc:
        raise BackendUnavailable(f"Redis did not answer: {exc}") from exc
