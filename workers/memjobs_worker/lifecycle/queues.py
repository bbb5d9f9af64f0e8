"""The Redis parts: the owner's jobs (queued, delayed, dead-lettered, and
those running) and every memjobs key that names the owner."""

from __future__ import annotations

import logging
import time

from memjobs_client import keys
from memjobs_client.errors import TransientError
from memjobs_client.redis_seam import redis_errors
from memjobs_worker.broker import drop_owner_messages
from memjobs_worker.lifecycle.parts import Owner, OwnerPart, StackParts

log = logging.getLogger(__name__)


class EraseIncomplete(TransientError):
    """Jobs of the owner were still running when the erasure's wait ran out:
    nothing of the stores was touched yet; run the erasure again."""

    reason = "erase_incomplete"


class QueuedJobsPart(OwnerPart):
    """Every Dramatiq message naming the owner: deleted when stored, waited for
    when a worker is running it (a running job could write the owner's data
    after the stores are erased; the owner's erasure marker makes the workers
    drop any of their jobs they have not started).

    Parameters:
        stack: its Redis.
        wait_ms: how long to wait for the owner's running jobs.
        poll_s: between two looks at the queues while waiting.
    """

    name = "queued_jobs"
    again_last = True

    def __init__(self, stack: StackParts, *, wait_ms: int, poll_s: float = 0.1) -> None:
        self._stack = stack
        self.wait_ms = wait_ms
        self.poll_s = poll_s

    def erase(self, owner: Owner) -> int:
        deadline = time.monotonic() + self.wait_ms / 1000
        dropped = 0
        while True:
            found = drop_owner_messages(self._stack.redis, owner.key)
            dropped += found.dropped
            if not found.running:
                return dropped
            if time.monotonic() >= deadline:
                raise EraseIncomplete(
                    f"{found.running} jobs of this owner were still running after "
                    f"{self.wait_ms / 1000:g} s (MEMJOBS_ERASE_WAIT_MS); their owner's new jobs are "
                    "dropped meanwhile: run the erasure again"
                )
            time.sleep(self.poll_s)  # another process's jobs: nothing to block on


class RedisKeysPart(OwnerPart):
    """Every memjobs key naming the owner's key: the learning and reindex locks,
    their fences and dirty flags, the extraction's debounce flag, queued-remember
    counts, session-end markers, a corpus's parts (:func:`memjobs_client.keys.owner_keys_pattern`)."""

    name = "redis_keys"
    again_last = True

    def __init__(self, stack: StackParts) -> None:
        self._stack = stack

    def erase(self, owner: Owner) -> int:
        client = self._stack.redis
        with redis_errors():
            found = list(client.scan_iter(match=keys.owner_keys_pattern(owner.key), count=1000))
            return int(client.delete(*found)) if found else 0
