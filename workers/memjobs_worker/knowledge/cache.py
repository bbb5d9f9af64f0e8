"""Vectors of a reindex in progress, kept in their own transactions so that a
failed or killed attempt's embedding work is reused by the retry.

What: :class:`EmbeddingCache` stores each batch of chunk vectors as soon as the
embedder returns it (one short transaction per batch), keyed by owner,
embedder (model id and vector size: the model id also fixes the ``passage:``
prefix the local model adds) and the chunk's hash (sha256 of its NFC text).
An attempt looks there before embedding and sends only what is missing.

Why a table beside the corpus and not the corpus itself: the corpus is written
all or nothing after every vector is in (a failed job leaves it exactly as it
was), so vectors computed before a failure have nowhere else to go. The cache
holds no text, only vectors, and only the owner's own reindexes read it.

Bounded: a reindex that wrote its corpus deletes the cache rows of the chunks
it wrote (a whole corpus: all the owner's rows); rows older than
:data:`MAX_AGE` (a job that dead-lettered and was never sent again) are
deleted by the next reindex of any owner.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Engine

from memjobs_worker.clock import Clock, utcnow
from memjobs_worker.db.connect import transaction
from memjobs_worker.knowledge.queries import text_array
from memjobs_worker.knowledge.schema import knowledge_embedding_cache

__all__ = ["EmbeddingCache", "MAX_AGE"]

#: How long the vectors of an attempt that never succeeded are kept.
MAX_AGE = timedelta(days=7)

_t = knowledge_embedding_cache
_c = _t.c


class EmbeddingCache:
    """Chunk vectors of reindexes not yet written, for one embedder.

    Parameters:
        engine: the state database (migrated: the table is on the core branch).
        model: the embedder's id (:func:`memjobs_worker.embedding.model_id`).
        dims: the vector size.
    """

    def __init__(self, engine: Engine, model: str, dims: int, *, clock: Clock = utcnow) -> None:
        self.engine = engine
        self.model = model
        self.dims = dims
        self.clock = clock

    def _mine(self, owner_key: str) -> sa.ColumnElement[bool]:
        return sa.and_(_c.owner_key == owner_key, _c.model == self.model, _c.dims == self.dims)

    def get(self, owner_key: str, chunk_hashes: Collection[str]) -> dict[str, list[float]]:
        """The cached vectors of these chunks (by hash)."""
        if not chunk_hashes:
            return {}
        with transaction(self.engine) as conn:
            rows = conn.execute(
                sa.select(_c.chunk_hash, _c.embedding).where(
                    self._mine(owner_key), _c.chunk_hash == sa.any_(text_array(chunk_hashes))
                )
            ).all()
        return {r.chunk_hash: list(r.embedding) for r in rows}

    def put(self, owner_key: str, vectors: Mapping[str, list[float]]) -> None:
        """Keep one batch's vectors (committed at once: they outlive the attempt)."""
        if not vectors:
            return
        now = self.clock()
        stmt = pg_insert(_t).on_conflict_do_nothing(index_elements=["owner_key", "model", "dims", "chunk_hash"])
        with transaction(self.engine) as conn:
            conn.execute(
                stmt,
                [
                    {
                        "owner_key": owner_key,
                        "model": self.model,
                        "dims": self.dims,
                        "chunk_hash": h,
                        "embedding": v,
                        "created_at": now,
                    }
                    for h, v in vectors.items()
                ],
            )

    def forget(self, owner_key: str, chunk_hashes: Collection[str] | None = None) -> int:
        """Delete the owner's rows for these chunks (None: all the owner's rows,
        of every embedder); returns how many were deleted."""
        where: sa.ColumnElement[bool] = _c.owner_key == owner_key
        if chunk_hashes is not None:
            if not chunk_hashes:
                return 0
            where = sa.and_(where, _c.chunk_hash == sa.any_(text_array(chunk_hashes)))
        with transaction(self.engine) as conn:
            return len(conn.execute(_t.delete().where(where).returning(_c.chunk_hash)).all())

    def prune(self, now: datetime | None = None) -> int:
        """Delete every owner's rows older than :data:`MAX_AGE`; returns how many."""
        cutoff = (now or self.clock()) - MAX_AGE
        with transaction(self.engine) as conn:
            return len(conn.execute(_t.delete().where(_c.created_at < cutoff).returning(_c.chunk_hash)).all())
