"""Knowledge chunks' vectors and the model that made them: the check and the re-embedding.

What: :func:`check_knowledge_vectors` runs when a process first embeds for
knowledge (a reindex or a search): it compares the embedder recorded for the
``knowledge`` space (:mod:`memjobs_worker.embedding.record`) with this
stack's and refuses (:class:`~memjobs_worker.embedding.record.EmbeddingModelChanged`)
while chunks embedded by another one remain. :func:`reembed_knowledge`
(``memjobs reembed``) clears those vectors and embeds every chunk without one,
batch by batch.

Why clearing first: a chunk without a vector is still found by its keywords,
and one with the current model's vector by both rankings; a chunk of the old
model's vector would be compared with questions it cannot answer. Clearing is
one statement (with the new record, one transaction), and what is left to do
is then exactly the chunks without a vector, so an interrupted re-embedding
resumes where it stopped. Chunks indexed while knowledge had no semantic
embedder (keywords alone: the hashed embedder, or the local model before it
served knowledge) get their first vector the same way; until they have one,
a stack that ranks knowledge by vectors refuses
(:class:`ChunksWithoutVectors`) rather than search a corpus half of which the
vector ranking cannot see. ``memjobs up`` embeds them before its workers start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from memjobs_client.errors import ConfigurationError
from memjobs_worker.db.connect import transaction
from memjobs_worker.embedding.record import EmbeddingModelChanged, record, recorded
from memjobs_worker.knowledge.schema import knowledge_chunks

#: Chunks embedded per call and per transaction.
REEMBED_BATCH = 32

Progress = Callable[[int, int], None]
_c = knowledge_chunks.c


class ChunksWithoutVectors(EmbeddingModelChanged):
    """Chunks indexed by keywords alone remain while this stack ranks knowledge by vectors too."""

    def __init__(self, current: str, count: int) -> None:
        ConfigurationError.__init__(
            self,
            f"{count} stored knowledge chunks have no vector (indexed while knowledge ranked by "
            f"keywords alone, or a re-embedding did not finish), but this stack ranks knowledge with "
            f"{current} too: its vector ranking would not see them. Run `memjobs reembed` to embed "
            f"them with {current} (resumable; progress on stderr; `memjobs up` does it before its "
            "workers start), or rank knowledge by keywords alone (MEMJOBS_EMBEDDING_BASE_URL unset "
            "and MEMJOBS_LOCAL_EMBEDDER=hashing)",
        )
        self.space = "knowledge"
        self.stored = "keywords alone"
        self.current = current
        self.count = count


def _no_progress(done: int, total: int) -> None:
    return None


def _bare(conn: Any) -> int:
    """Chunks with no vector (indexed by keywords alone, or a re-embedding not finished)."""
    return int(conn.execute(sa.select(sa.func.count()).where(_c.embedding.is_(None))).scalar_one())


def _foreign(conn: Any, stored: tuple[str, int] | None, model: str, dims: int) -> int:
    """Chunks holding a vector another embedder made."""
    embedded = sa.select(sa.func.count()).where(_c.embedding.is_not(None))
    if stored is None:  # before the record: only another size is known to be foreign
        return int(conn.execute(embedded.where(_c.dims != dims)).scalar_one())
    if stored == (model, dims):
        return 0
    return int(conn.execute(embedded).scalar_one())


def check_knowledge_vectors(engine: Engine, model: str, dims: int) -> None:
    """Record the embedder when no chunk says otherwise; refuse a mix.

    Raises:
        EmbeddingModelChanged: chunks embedded by another embedder remain.
        ChunksWithoutVectors: chunks without a vector remain.
    """
    with transaction(engine) as conn:
        stored = recorded(conn, "knowledge")
        foreign = _foreign(conn, stored, model, dims)
        if foreign:
            name = f"{stored[0]} ({stored[1]} dimensions)" if stored else "another embedder"
            raise EmbeddingModelChanged("knowledge", name, model, foreign)
        bare = _bare(conn)
        if bare:
            raise ChunksWithoutVectors(model, bare)
        if stored != (model, dims):
            record(conn, "knowledge", model, dims)


def chunks_to_reembed(engine: Engine, model: str, dims: int, *, semantic: bool) -> int:
    """How many chunks ``memjobs reembed`` would clear or embed."""
    with transaction(engine) as conn:
        foreign = _foreign(conn, recorded(conn, "knowledge"), model, dims)
        if not semantic:
            return foreign
        return foreign + _bare(conn)


def reembed_knowledge(
    engine: Engine,
    embed: Callable[[list[str]], list[list[float]]] | None,
    model: str,
    dims: int,
    *,
    batch: int = REEMBED_BATCH,
    progress: Progress = _no_progress,
) -> int:
    """Clear other embedders' vectors, then embed every chunk without one (with
    ``embed``; None: clear only, for an embedder knowledge does not use).
    Returns how many chunks were embedded."""
    with transaction(engine) as conn:
        stored = recorded(conn, "knowledge")
        if _foreign(conn, stored, model, dims):
            stale: sa.ColumnElement[bool] = _c.embedding.is_not(None)
            if stored is None:
                stale = sa.and_(stale, _c.dims != dims)
            conn.execute(knowledge_chunks.update().where(stale).values(embedding=None, dims=None))
        record(conn, "knowledge", model, dims)
        total = _bare(conn)
    if embed is None or total == 0:
        return 0
    done = 0
    progress(done, total)
    key = sa.tuple_(_c.owner_key, _c.doc_id, _c.chunk_index)
    while True:
        with transaction(engine) as conn:
            rows = conn.execute(
                sa.select(_c.owner_key, _c.doc_id, _c.chunk_index, _c.text)
                .where(_c.embedding.is_(None))
                .order_by(*key.clauses)
                .limit(batch)
            ).all()
        if not rows:
            return done
        vectors = embed([r.text for r in rows])
        with transaction(engine) as conn:
            conn.execute(
                knowledge_chunks.update()
                .where(
                    _c.owner_key == sa.bindparam("k_owner"),
                    _c.doc_id == sa.bindparam("k_doc"),
                    _c.chunk_index == sa.bindparam("k_index"),
                )
                .values(embedding=sa.bindparam("k_embedding", type_=_c.embedding.type), dims=sa.bindparam("k_dims")),
                [
                    {
                        "k_owner": r.owner_key,
                        "k_doc": r.doc_id,
                        "k_index": r.chunk_index,
                        "k_embedding": v,
                        "k_dims": len(v),
                    }
                    for r, v in zip(rows, vectors, strict=True)
                ],
            )
        done += len(rows)
        progress(done, total)
