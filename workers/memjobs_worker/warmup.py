"""Build a worker process's runtime at boot, not on its first message."""

from __future__ import annotations

import logging
from collections.abc import Callable, Set

import dramatiq
from dramatiq.middleware import Middleware

log = logging.getLogger(__name__)


class Warmup(Middleware):
    """Calls ``build(queues)`` once the worker has booted, with the queues it
    consumes (None: all); a failure is logged, and the first job retries it (so a
    database that is still starting costs a retry)."""

    def __init__(self, build: Callable[[Set[str] | None], None]) -> None:
        self.build = build

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        try:
            self.build(worker.consumer_whitelist or None)
        except Exception as exc:  # noqa: BLE001 - reported, then retried by the first job
            log.warning("warm-up failed; the first job will retry", extra={"reason": type(exc).__name__})
