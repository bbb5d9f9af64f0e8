"""After forgets, rewrite the embedded Redis's append-only file.

Redis's append-only file is a log of commands: the ``remember`` message that
carried a source's text stays in it after the message was acknowledged and the
source forgotten, until Redis rewrites the file from its current data. So the
sweeper of ``memjobs up`` asks for that rewrite (``BGREWRITEAOF``) once the
ledger counts more forgotten sources than at the last rewrite and the queues
are idle (a forgotten source's message may still be waiting to be consumed) —
or, under constant load, at most ``MAX_WAIT_S`` after the first such forget.
Forgets are batched: one rewrite covers every forget since the previous one.
"""

from __future__ import annotations

import logging
import time

import redis

from memjobs_client.redis_seam import redis_best_effort
from memjobs_worker.memory.store.base import StateStore
from memjobs_worker.ops.status import queue_stats

log = logging.getLogger(__name__)

#: Longest wait for idle queues before rewriting anyway.
MAX_WAIT_S = 300.0


class ForgetRewriter:
    """Decides, on each sweeper pass, whether the append-only file needs a rewrite."""

    def __init__(self, store: StateStore, redis_client: redis.Redis) -> None:
        self.store = store
        self.redis = redis_client
        # 0, not the current count: forgets before a restart get their rewrite too.
        self._rewritten_at_count = 0
        self._dirty_since: float | None = None

    def _forgotten(self) -> int:
        return int(self.store.counts_by_state().get("forgotten", 0))

    def maybe_rewrite(self) -> bool:
        """One check; True when a rewrite was started."""
        forgotten = self._forgotten()
        if forgotten == self._rewritten_at_count:
            return False
        now = time.monotonic()
        if self._dirty_since is None:
            self._dirty_since = now
        queues = queue_stats(self.redis)
        idle = not any(q["ready"] or q["delayed"] or q["in_flight"] for q in queues.values())
        if not idle and now - self._dirty_since < MAX_WAIT_S:
            return False
        with redis_best_effort() as attempt:
            if int(self.redis.info("persistence").get("aof_rewrite_in_progress", 0)):
                return False
            self.redis.bgrewriteaof()
        if attempt.failed:
            log.warning("append-only rewrite not started", extra={"error": type(attempt.error).__name__})
            return False
        self._rewritten_at_count = forgotten
        self._dirty_since = None
        log.info("append-only file rewrite started after forgets")
        return True
