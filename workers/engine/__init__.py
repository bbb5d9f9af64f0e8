"""Memory engines: the seam, mem0, and the offline embedder."""

from workers.engine.base import MemoryEngine, MemoryHit
from workers.engine.offline_embedder import HashingEmbedder

__all__ = ["HashingEmbedder", "MemoryEngine", "MemoryHit"]
