"""The knowledge part: the owner's documents, their chunks (text, tokens,
vectors) and the embedding cache. Knowledge is opt-in: with its tables absent
there is nothing to erase or export; an import with knowledge off skips its
documents and says so."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import sqlalchemy as sa

from memjobs_worker.db.connect import transaction
from memjobs_worker.knowledge.schema import (
    knowledge_chunks,
    knowledge_documents,
    knowledge_embedding_cache,
)
from memjobs_worker.knowledge.store import StoredChunk
from memjobs_worker.lifecycle.parts import Owner, OwnerPart, Record, Restoring, StackParts
from memjobs_worker.lifecycle.records import ChunkOut, KnowledgeDocumentOut

if TYPE_CHECKING:
    pass


class KnowledgePart(OwnerPart):
    """The owner's knowledge documents with their chunks' text (in order).

    Parameters:
        stack: its state database; its knowledge store and embedder (or None:
            keywords only), built only by an import.
        enabled: whether knowledge is on here (an import needs it on).
    """

    name = "knowledge"
    records = {"knowledge_document": KnowledgeDocumentOut}

    def __init__(self, stack: StackParts, *, enabled: bool) -> None:
        self._stack = stack
        self._enabled = enabled

    def _present(self) -> bool:
        return sa.inspect(self._stack.db).has_table(knowledge_documents.name)

    def erase(self, owner: Owner) -> int:
        if not self._present():
            return 0
        with transaction(self._stack.db) as conn:
            return sum(
                conn.execute(t.delete().where(t.c.owner_key == owner.key)).rowcount
                for t in (knowledge_chunks, knowledge_embedding_cache, knowledge_documents)
            )

    def export(self, owner: Owner) -> Iterator[Record]:
        if not self._present():
            return
        d, c = knowledge_documents, knowledge_chunks
        with transaction(self._stack.db) as conn:
            documents = (
                conn.execute(sa.select(d).where(d.c.owner_key == owner.key).order_by(d.c.doc_id)).mappings().all()
            )
            chunks = conn.execute(
                sa.select(c.c.doc_id, c.c.chunk_index, c.c.text, c.c.chunk_hash)
                .where(c.c.owner_key == owner.key)
                .order_by(c.c.doc_id, c.c.chunk_index)
            ).all()
        by_doc: dict[str, list[ChunkOut]] = {}
        for row in chunks:
            by_doc.setdefault(row.doc_id, []).append(
                ChunkOut(index=row.chunk_index, text=row.text, chunk_hash=row.chunk_hash)
            )
        for document in documents:
            yield KnowledgeDocumentOut.model_validate(
                {**dict(document), "chunks": by_doc.get(document["doc_id"], [])}
            ).record()

    def restore(self, owner: Owner, records: Sequence[Record], restoring: Restoring) -> int:
        if not records:
            return 0
        if not self._enabled:
            restoring.notes.append(
                f"{len(records)} knowledge documents skipped: knowledge is off "
                "here (MEMJOBS_KNOWLEDGE=on, then import again)"
            )
            return 0
        store, embedder = self._stack.knowledge, self._stack.knowledge_embedder
        stored = {d.doc_id: d for d in store.documents(owner.key)}
        changed = 0
        for document in (KnowledgeDocumentOut.model_validate(r) for r in records):
            previous = stored.get(document.doc_id)
            if (
                previous is not None
                and previous.state == document.state
                and previous.content_hash == document.content_hash
            ):
                continue  # the same document: nothing to do
            if document.state == "refused":
                store.refuse_document(
                    owner.key,
                    document.doc_id,
                    document.title,
                    document.reason or "refused",
                    source_label=document.source_label,
                    content_hash=document.content_hash,
                )
            else:
                texts = [chunk.text for chunk in document.chunks]
                vectors = embedder.embed_batch(texts, "add") if embedder is not None and texts else [None] * len(texts)
                store.put_document(
                    owner.key,
                    document.doc_id,
                    document.title,
                    document.source_label,
                    document.content_hash or "",
                    [
                        StoredChunk(chunk.index, chunk.text, chunk.chunk_hash, vector)
                        for chunk, vector in zip(document.chunks, vectors, strict=True)
                    ],
                    chars=document.chars,
                )
            changed += 1
        return changed
