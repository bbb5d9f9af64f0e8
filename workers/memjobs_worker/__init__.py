"""memjobs workers: actors, the ledger, the learning lock and the engines.

The worker processes' entry module is :mod:`memjobs_worker.app` (``dramatiq
memjobs_worker.app``); the command line is :mod:`memjobs_worker.cli.main`.

The names below are imported on first use (PEP 562): importing a submodule —
``memjobs --help``, a producer command — does not pay for the whole worker
(mem0, the model client, SQLAlchemy).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'memjobs_worker' has no attribute {name!r}")
    value = getattr(import_module(_HOME[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
