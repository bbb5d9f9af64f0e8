"""``memjobs sweep --every N``: the sweeper as a long-running service.

One pass every N seconds (:func:`sweep_once`: pending owners re-enqueued,
retention applied); a failed pass (Redis or the database away) is logged and
the next one tries again. Each pass touches ``<data dir>/run/sweeper.alive``,
which the container and systemd health checks read. SIGTERM or SIGINT ends
the loop after the current pass; a second signal exits at once (a pass is
idempotent: nothing is lost).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from types import FrameType

from memjobs_client.errors import MemjobsError
from memjobs_worker.embedded.supervisor import sweep_once
from memjobs_worker.runtime import Runtime
from memjobs_worker.settings import Settings

log = logging.getLogger(__name__)


def alive_file(settings: Settings) -> Path:
    return settings.data_dir / "run" / "sweeper.alive"


def sweep_forever(runtime: Runtime, settings: Settings, every_s: float) -> None:
    """Sweep every ``every_s`` seconds until a SIGTERM/SIGINT."""
    received: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if received:
            os._exit(1)  # a second signal: at once
        received.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    marker = alive_file(settings)
    marker.parent.mkdir(parents=True, exist_ok=True)
    while not received:
        try:
            done = sweep_once(runtime, settings)
            marker.touch()
            if done["owners_requeued"]:
                log.info("sweep", extra={"owners_requeued": done["owners_requeued"]})
        except MemjobsError as exc:
            log.warning("sweep failed", extra={"reason": exc.reason})
        deadline = time.monotonic() + every_s
        while not received and time.monotonic() < deadline:
            time.sleep(min(0.2, every_s))
