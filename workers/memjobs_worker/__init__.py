"""memjobs workers: actors, the ledger, the learning lock and the engines.

The worker processes' entry module is :mod:`memjobs_worker.app` (``dramatiq
memjobs_worker.app``); the command line is :mod:`memjobs_worker.cli.main`.
"""

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
