"""Build a worker process's runtime at boot, not on its first message."""

from __future__ import annotations

import logging
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware

log = logging.getLogger(__name__)


class Warmup(Middleware):
    """Calls ``build()`` once the worker has booted; a failure is logged, and the
    first job retries it (so a database that is still starting costs a retry)."""

    def __init__(self, build: Any) -> None:
        self.build = build

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        try:
            self.build()
        except Exception as exc:  # noqa: BLE001 - reported, then retried by the first job
            log.warning("warm-up failed; the first job will retry", extra={"reason": type(exc).__name__})
