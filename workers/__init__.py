"""memjobs workers: actors, the ledger, the learning lock and the engines.

The worker processes' entry module is :mod:`workers.app` (``dramatiq
workers.app``); the command line is :mod:`workers.cli.main`.
"""

from workers.locks import LeaseLock
from workers.pipeline import ExtractionScheduler, MemoryPipeline, RecallHit, sweep
from workers.runtime import Runtime
from workers.settings import Settings, load_settings

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
