"""The hashed embedder, under its old name: it lives in
:mod:`memjobs_worker.embedding.hashing` (below the features, so that the embedder
built from settings can pick it)."""

from memjobs_worker.embedding.hashing import HashingEmbedder

__all__ = ["HashingEmbedder"]
