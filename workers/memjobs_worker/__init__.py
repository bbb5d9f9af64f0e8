"""memjobs workers: actors, the ledger, the learning lock and the engines.

The worker processes' entry module is :mod:`memjobs_worker.app` (``dramatiq
memjobs_worker.app``); the command line is :mod:`memjobs_worker.cli.main`.

The names below are imported on first use (PEP 562): importing a submodule —
``memjobs --help``, a producer command — does not pay for the whole worker
(mem0, the model client, SQLAlchemy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memjobs_worker.lazy import lazy_exports

if TYPE_CHECKING:
    from memjobs_worker.lease import LeaseLock
    from memjobs_worker.memory.intake import ExtractionScheduler, sweep
    from memjobs_worker.memory.pipeline import MemoryPipeline, RecallHit
    from memjobs_worker.runtime import Runtime
    from memjobs_worker.settings import Settings, load_settings

__all__ = [
    # settings and wiring
    "Runtime",
    "Settings",
    "load_settings",
    # the pipeline
    "ExtractionScheduler",
    "MemoryPipeline",
    "RecallHit",
    "sweep",
    # the learning lock
    "LeaseLock",
]

_HOME = {
    "Runtime": "memjobs_worker.runtime",
    "Settings": "memjobs_worker.settings",
    "load_settings": "memjobs_worker.settings",
    "ExtractionScheduler": "memjobs_worker.memory.intake",
    "sweep": "memjobs_worker.memory.intake",
    "MemoryPipeline": "memjobs_worker.memory.pipeline",
    "RecallHit": "memjobs_worker.memory.pipeline",
    "LeaseLock": "memjobs_worker.lease",
}


__getattr__ = lazy_exports(__name__, _HOME, globals())


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
