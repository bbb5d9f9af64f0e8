"""Which model made the stored vectors: one row per vector space.

What: the ``embedding_models`` table (migration ``0008_embedding_model``) holds,
for each space of stored vectors — ``"memory"`` (mem0's collection) and
``"knowledge"`` (the chunks) — the identity of the embedder that made them
(:func:`memjobs_worker.embedding.model_id`) and their size. :func:`recorded`
reads it, :func:`record` writes it.

Why: vectors of two models are not comparable, even at one size (a query
vector of model B scores model A's memories at random). A stack that starts
with another embedder than the one recorded must re-embed its vectors
(``memjobs reembed``) or refuse: never answer from a mix
(:class:`EmbeddingModelChanged`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from memjobs_client.errors import ConfigurationError
from memjobs_worker.db.metadata import key, required, table, timestamp

Space = Literal["memory", "knowledge"]

#: One row per space of stored vectors: the model that made them and their size.
embedding_models = table(
    "embedding_models",
    key("space"),
    required("model"),
    required("dims", sa.Integer),
    timestamp("updated_at", nullable=False),
)


class EmbeddingModelChanged(ConfigurationError):
    """The stored vectors of a space came from another embedder than this stack's."""

    reason = "embedding_model_changed"

    def __init__(self, space: Space, stored: str, current: str, count: int) -> None:
        what = "memories" if space == "memory" else "knowledge chunks"
        super().__init__(
            f"{count} stored {what} were embedded by {stored}, but this stack embeds with "
            f"{current}: their vectors cannot be compared. Run `memjobs reembed` to re-embed "
            f"them with {current} (resumable; progress on stderr), or set the embedder back "
            "(MEMJOBS_EMBEDDING_BASE_URL, MEMJOBS_EMBEDDING_MODEL, MEMJOBS_LOCAL_EMBEDDER)"
        )
        self.space = space
        self.stored = stored
        self.current = current
        self.count = count


def recorded(conn: Connection, space: Space) -> tuple[str, int] | None:
    """The (model, dims) recorded for ``space``, or None before any."""
    row = conn.execute(
        sa.select(embedding_models.c.model, embedding_models.c.dims).where(embedding_models.c.space == space)
    ).first()
    return None if row is None else (row.model, int(row.dims))


def record(conn: Connection, space: Space, model: str, dims: int) -> None:
    """Record that ``space``'s vectors are (from now on) ``model``'s, of ``dims``."""
    values = {"model": model, "dims": dims, "updated_at": datetime.now(UTC)}
    conn.execute(
        pg_insert(embedding_models)
        .values(space=space, **values)
        .on_conflict_do_update(index_elements=["space"], set_=values)
    )
