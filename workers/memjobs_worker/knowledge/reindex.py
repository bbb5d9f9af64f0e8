"""``reindex_knowledge``: the owner's corpus in, chunks and vectors stored.

Each document is resolved first (a host's text, or a file read under the
roots the host allowed), checked (size, binary, encoding, emptiness, the
sensitive-content check on its path and its text) and refused one by one with
a reason, the rest of the batch going on. Then, in two phases:

1. embed: only the chunks whose hash has no stored vector of the same size are
   sent to the embedding service, in batches (tenacity retries transient
   failures inside the embedder); an unchanged document costs nothing;
2. write: every changed document is replaced atomically, and the owner's
   documents absent from the corpus are removed.

An embedding failure that outlasts the retries fails the job before phase 2,
so the stored corpus is left exactly as it was (Dramatiq retries, then
dead-letters it). One reindex per owner at a time, with the same Redis lease
lock as learning (``reindex`` instead of ``learn``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memjobs_client.contracts import KnowledgePath, KnowledgeText, ReindexKnowledge, content_hash
from memjobs_client.sensitive import find_sensitive_path, find_sensitive_text
from memjobs_worker.knowledge.chunking import chunk_hash, chunk_text
from memjobs_worker.knowledge.store import KnowledgeStore, StoredChunk
from memjobs_worker.settings import Settings

EmbedBatch = Callable[[Sequence[str]], list[list[float]]]


@dataclass(frozen=True)
class Resolved:
    doc_id: str
    title: str
    source_label: str
    text: str


@dataclass
class ReindexReport:
    indexed: int = 0
    unchanged: int = 0
    removed: int = 0
    refused: dict[str, str] = field(default_factory=dict)  # doc id → reason
    chunks: int = 0
    embedded_chunks: int = 0
    embedding_calls: int = 0


class Refused(Exception):
    def __init__(self, doc_id: str, title: str, reason: str) -> None:
        super().__init__(reason)
        self.doc_id, self.title, self.reason = doc_id, title, reason


def resolve(doc: KnowledgeText | KnowledgePath, roots: Sequence[str], s: Settings) -> Resolved:
    """The document's text and public labels, or :class:`Refused` with a reason."""
    if isinstance(doc, KnowledgeText):
        resolved = Resolved(doc.doc_id, doc.title, f"doc:{doc.doc_id}", doc.text)
    else:
        resolved = _read_path(doc.path, roots, s)
    if len(resolved.text) > s.knowledge_max_doc_chars:
        raise Refused(resolved.doc_id, resolved.title, "too_large")
    if not resolved.text.strip():
        raise Refused(resolved.doc_id, resolved.title, "empty")
    if find_sensitive_text(resolved.text) is not None:
        raise Refused(resolved.doc_id, resolved.title, "sensitive_content")
    return resolved


def _read_path(raw: str, roots: Sequence[str], s: Settings) -> Resolved:
    path = Path(raw)
    # The id hides the path: search results and logs never show where a file lives.
    doc_id = "file:" + hashlib.sha256(os.path.abspath(raw).encode()).hexdigest()[:24]
    title = path.name or "file"
    if find_sensitive_path(raw) is not None:
        raise Refused(doc_id, "file", "sensitive_path")
    if not path.is_absolute():
        raise Refused(doc_id, title, "path_not_absolute")
    real = path.resolve()
    allowed = [Path(r).resolve() for r in roots]
    if not any(real == root or root in real.parents for root in allowed):
        raise Refused(doc_id, title, "path_not_allowed")
    if find_sensitive_path(str(real)) is not None:
        raise Refused(doc_id, title, "sensitive_path")
    try:
        if not real.is_file():
            raise Refused(doc_id, title, "not_a_file")
        if real.stat().st_size > s.knowledge_max_file_bytes:
            raise Refused(doc_id, title, "too_large")
        data = real.read_bytes()
    except OSError:
        raise Refused(doc_id, title, "unreadable") from None
    if b"\x00" in data:
        raise Refused(doc_id, title, "binary")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(doc_id, title, "undecodable") from None
    return Resolved(doc_id, title, f"file:{title}", text)


def reindex(payload: ReindexKnowledge, *, store: KnowledgeStore, embed: EmbedBatch | None,
            dims: int | None, settings: Settings) -> ReindexReport:
    """Bring the owner's index to ``payload.documents``; see the module docstring.

    Raises:
        ModelUnavailable: the embedding service failed (nothing was written).
        BackendUnavailable: the database did not answer.
    """
    owner = payload.owner_key
    report = ReindexReport()
    stored = {d.doc_id: d for d in store.documents(owner)}
    corpus: list[tuple[Resolved, str]] = []
    refusals: list[Refused] = []
    total_chars = 0
    for doc in payload.documents:
        try:
            resolved = resolve(doc, payload.allowed_roots, settings)
            total_chars += len(resolved.text)
            if total_chars > settings.knowledge_max_corpus_chars:
                raise Refused(resolved.doc_id, resolved.title, "corpus_too_large")
        except Refused as refused:
            refusals.append(refused)
            continue
        corpus.append((resolved, content_hash(resolved.text)))

    # Phase 1: chunk and embed what changed.
    plans: list[tuple[Resolved, str, list[StoredChunk]]] = []
    for resolved, digest in corpus:
        previous = stored.get(resolved.doc_id)
        if previous is not None and previous.state == "indexed" and previous.content_hash == digest:
            report.unchanged += 1
            continue
        pieces = chunk_text(resolved.text, size_chars=settings.knowledge_chunk_chars,
                            overlap_chars=settings.knowledge_chunk_overlap_chars)
        plans.append((resolved, digest, [StoredChunk(c.index, c.text, chunk_hash(c.text), None)
                                         for c in pieces]))
    if embed is not None and dims is not None:
        plans = _embed(plans, store, owner, embed, dims, settings.knowledge_embed_batch, report)

    # Phase 2: write.
    for resolved, digest, chunks in plans:
        store.put_document(owner, resolved.doc_id, resolved.title, resolved.source_label, digest, chunks,
                           chars=len(resolved.text))
        report.indexed += 1
        report.chunks += len(chunks)
    for refusal in refusals:
        store.refuse_document(owner, refusal.doc_id, refusal.title, refusal.reason)
        report.refused[refusal.doc_id] = refusal.reason
    keep = {r.doc_id for r, _ in corpus} | {r.doc_id for r in refusals}
    report.removed = store.remove_documents_except(owner, keep)
    return report


def _embed(plans: list[tuple[Resolved, str, list[StoredChunk]]], store: KnowledgeStore, owner: str,
           embed: EmbedBatch, dims: int, batch: int,
           report: ReindexReport) -> list[tuple[Resolved, str, list[StoredChunk]]]:
    hashes = {c.chunk_hash for _, _, chunks in plans for c in chunks}
    known = store.chunk_embeddings(owner, hashes, dims)
    missing: dict[str, str] = {}
    for _, _, chunks in plans:
        for c in chunks:
            if c.chunk_hash not in known:
                missing.setdefault(c.chunk_hash, c.text)
    pending = list(missing.items())
    for start in range(0, len(pending), batch):
        part = pending[start:start + batch]
        vectors = embed([text for _, text in part])
        report.embedding_calls += 1
        report.embedded_chunks += len(part)
        known.update({h: v for (h, _), v in zip(part, vectors, strict=True)})
    return [(r, d, [StoredChunk(c.index, c.text, c.chunk_hash, known[c.chunk_hash]) for c in chunks])
            for r, d, chunks in plans]
