"""Re-embedding after a change of embedder: what is left, and doing it.

What: :func:`pending` says how many memories and knowledge chunks hold vectors
another embedder made (and how many chunks have none yet); :func:`reembed`
re-embeds them with this stack's embedder
(:func:`memjobs_worker.embedding.build_embedder`), memories first, reporting
progress. ``memjobs reembed`` runs it by hand; ``memjobs up`` runs it before
its workers start whenever stored vectors came from another embedder (an
upgrade that changed the default, or a changed setting), so the workers never
meet the refusal.

Each half is resumable (see :mod:`memjobs_worker.memory.engine.reembed` and
:mod:`memjobs_worker.knowledge.vectors`): an interrupted run is finished by
the next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memjobs_worker.db import create_db_engine
from memjobs_worker.db.connect import libpq_url
from memjobs_worker.embedding import build_embedder, model_id, semantic
from memjobs_worker.settings import EmbeddingSettings, KnowledgeSettings, MemorySettings, ModelSettings

#: (what, done, total): what is "memories" or "knowledge chunks".
Progress = Callable[[str, int, int], None]


def _quiet(what: str, done: int, total: int) -> None:
    return None


@dataclass(frozen=True)
class Pending:
    """What a re-embedding would do."""

    model: str
    #: Memories whose vectors another embedder made.
    memories: int
    #: Knowledge chunks whose vectors another embedder made (cleared, then embedded).
    foreign_chunks: int
    #: Knowledge chunks with no vector yet (indexed by keywords alone), embedded too.
    bare_chunks: int

    @property
    def required(self) -> bool:
        """Stored vectors of another embedder, or chunks without one while knowledge
        ranks by vectors (``bare_chunks`` counts only then): the stack refuses them."""
        return self.memories > 0 or self.foreign_chunks > 0 or self.bare_chunks > 0


def pending(
    embedding: EmbeddingSettings, memory: MemorySettings, knowledge: KnowledgeSettings, database_url: str
) -> Pending:
    """How many memories and chunks a re-embedding would touch (the schema must be migrated)."""
    from memjobs_worker.memory.engine.reembed import memories_to_reembed

    model, dims = model_id(embedding), embedding.vector_dims
    memories = memories_to_reembed(libpq_url(database_url), model, dims) if memory.enabled else 0
    foreign = bare = 0
    if knowledge.enabled:
        from memjobs_worker.knowledge.schema import ensure_schema
        from memjobs_worker.knowledge.vectors import chunks_to_reembed

        engine = create_db_engine(database_url, pool_size=1)
        try:
            ensure_schema(engine)
            foreign = chunks_to_reembed(engine, model, dims, semantic=False)
            if semantic(embedding):
                bare = chunks_to_reembed(engine, model, dims, semantic=True) - foreign
        finally:
            engine.dispose()
    return Pending(model, memories, foreign, bare)


def reembed(
    model: ModelSettings,
    embedding: EmbeddingSettings,
    memory: MemorySettings,
    knowledge: KnowledgeSettings,
    database_url: str,
    *,
    progress: Progress = _quiet,
) -> tuple[int, int]:
    """Re-embed memories and knowledge chunks (each when its feature is on) with this stack's embedder.

    Returns:
        (memories re-embedded, chunks embedded).

    Raises:
        ConfigurationError: the local model is chosen but not installed here.
        ModelUnavailable: the embedding service failed (run again: it resumes).
    """
    made_by, dims = model_id(embedding), embedding.vector_dims
    embedder = build_embedder(model, embedding)
    memories = chunks = 0
    if memory.enabled:
        from memjobs_worker.memory.engine.reembed import reembed_memories

        memories = reembed_memories(
            libpq_url(database_url),
            embedder,
            made_by,
            dims,
            progress=lambda done, total: progress("memories", done, total),
        )
    if knowledge.enabled:
        from memjobs_worker.knowledge.schema import ensure_schema
        from memjobs_worker.knowledge.vectors import reembed_knowledge

        engine = create_db_engine(database_url, pool_size=1)
        try:
            ensure_schema(engine)
            chunks = reembed_knowledge(
                engine,
                embedder.embed_batch if semantic(embedding) else None,
                made_by,
                dims,
                batch=knowledge.embed_batch,
                progress=lambda done, total: progress("knowledge chunks", done, total),
            )
        finally:
            engine.dispose()
    return memories, chunks
