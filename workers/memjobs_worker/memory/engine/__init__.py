"""Memory engines: the seam, its in-memory twin, and the offline embedder.

mem0's engine (:mod:`memjobs_worker.memory.engine.mem0_engine`) is not imported
here: mem0 is heavy, and only a worker with personal memory on loads it.
"""

from memjobs_worker.memory.engine.base import MemoryEngine, MemoryHit
from memjobs_worker.memory.engine.offline_embedder import HashingEmbedder
from memjobs_worker.memory.engine.stub import EngineCall, InMemoryEngine

__all__ = [
    # the seam
    "MemoryEngine",
    "MemoryHit",
    # the twin for tests
    "EngineCall",
    "InMemoryEngine",
    # the offline embedder
    "HashingEmbedder",
]
