"""Memory engines: the seam, mem0, and the offline embedder."""

from memjobs_worker.memory.engine.base import MemoryEngine, MemoryHit
from memjobs_worker.memory.engine.offline_embedder import HashingEmbedder

__all__ = ["HashingEmbedder", "MemoryEngine", "MemoryHit"]
