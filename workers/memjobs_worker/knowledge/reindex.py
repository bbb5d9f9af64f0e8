"""``reindex_knowledge``: the owner's corpus in, chunks and vectors stored.

Each document is resolved first (a host's text, or a file read under the
roots the host allowed, see :mod:`memjobs_worker.knowledge.files`), checked
(size, binary, encoding, emptiness, the sensitive-content check on its path
and its text) and refused one by one with a reason, the rest of the batch
going on: no property of one document (its name, a link, a permission) can
fail the batch. Then, in two phases:

1. embed: only the chunks whose hash has no stored vector of the same size are
   sent to the embedding service, in batches (tenacity retries transient
   failures inside the embedder); an unchanged document costs nothing. Each
   batch's vectors are also kept at once in the embedding cache
   (:mod:`memjobs_worker.knowledge.cache`, its own short transaction), and an
   attempt takes from there what an earlier, failed or killed attempt already
   embedded, so a retry embeds only the rest;
2. write: every changed document is replaced atomically, and the owner's
   documents absent from the corpus are removed.

An embedding failure that outlasts the retries fails the job before phase 2,
so the stored corpus is left exactly as it was (Dramatiq retries, then
dead-letters it); only the cache keeps the vectors made before the failure. A
reindex that wrote its corpus deletes the cache rows of what it wrote. One
reindex per owner at a time, with the same Redis lease lock as learning (``reindex`` instead of ``learn``).

A corpus larger than one message is sent in parts
(:class:`~memjobs_client.contracts.CorpusPart`): each part is indexed as above
on its own, and the removal of absent documents waits until every part is in
(:class:`~memjobs_worker.knowledge.parts.CorpusParts`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from memjobs_client.contracts import (
    CorpusPart,
    KnowledgePath,
    KnowledgeRefusal,
    KnowledgeText,
    ReindexKnowledge,
    content_hash,
    knowledge_path_id,
)
from memjobs_client.errors import InvalidPayload
from memjobs_client.sensitive import find_sensitive_text
from memjobs_worker.knowledge.cache import EmbeddingCache
from memjobs_worker.knowledge.chunking import chunk_hash, chunk_text
from memjobs_worker.knowledge.files import Refused, Resolved, public_name, read_document
from memjobs_worker.knowledge.store import KnowledgeStore, StoredChunk
from memjobs_worker.settings import KnowledgeSettings

__all__ = ["reindex", "resolve", "ReindexReport", "Refused", "Resolved", "PartLedger"]

log = logging.getLogger(__name__)
#: Seconds between two progress lines while a reindex embeds.
PROGRESS_EVERY_S = 30.0
EmbedBatch = Callable[[Sequence[str]], list[list[float]]]
#: Records a part of a corpus; returns the whole corpus's doc ids once all parts are in.
PartLedger = Callable[[str, CorpusPart, Collection[str]], "set[str] | None"]


@dataclass
class ReindexReport:
    """What one reindex message did; ``complete`` is False for a part whose
    corpus still misses other parts (nothing was removed yet)."""

    indexed: int = 0
    unchanged: int = 0
    removed: int = 0
    refused: dict[str, str] = field(default_factory=dict)  # doc id → reason
    chunks: int = 0
    embedded_chunks: int = 0
    cached_chunks: int = 0
    embedding_calls: int = 0
    complete: bool = True

    def refusal_counts(self) -> dict[str, int]:
        """How many documents were refused for each reason (what a log line may say)."""
        return dict(sorted(Counter(self.refused.values()).items()))


def resolve(
    doc: KnowledgeText | KnowledgePath | KnowledgeRefusal, roots: Sequence[str], knowledge: KnowledgeSettings
) -> Resolved:
    """The document's text and public labels, or :class:`Refused` with a reason.

    Never raises anything else for a property of the document: an unexpected
    error reading it refuses it as ``unreadable`` (and says so in the log,
    without the path).
    """
    if isinstance(doc, KnowledgeRefusal):
        raise Refused(doc.doc_id, doc.title, doc.reason)
    if isinstance(doc, KnowledgeText):
        resolved = Resolved(doc.doc_id, doc.title, f"doc:{doc.doc_id}", doc.text)
    else:
        try:
            resolved = read_document(doc.path, roots, knowledge.root_paths, max_bytes=knowledge.max_file_bytes)
        except Refused:
            raise
        except Exception as exc:  # noqa: BLE001 - one document must never fail the batch
            doc_id = knowledge_path_id(doc.path)
            log.warning("document unreadable", extra={"doc_id": doc_id, "error": type(exc).__name__})
            raise Refused(doc_id, public_name(doc.path.rsplit("/", 1)[-1]), "unreadable") from None
    if "\x00" in resolved.text:
        raise Refused(resolved.doc_id, resolved.title, "binary")
    if len(resolved.text) > knowledge.max_doc_chars:
        raise Refused(resolved.doc_id, resolved.title, "too_large")
    if not resolved.text.strip():
        raise Refused(resolved.doc_id, resolved.title, "empty")
    if find_sensitive_text(resolved.text) is not None:
        raise Refused(resolved.doc_id, resolved.title, "sensitive_content")
    return resolved


def reindex(
    payload: ReindexKnowledge,
    *,
    store: KnowledgeStore,
    embed: EmbedBatch | None,
    dims: int | None,
    knowledge: KnowledgeSettings,
    parts: PartLedger | None = None,
    cache: EmbeddingCache | None = None,
) -> ReindexReport:
    """Bring the owner's index to ``payload.documents``; see the module docstring.

    Parameters:
        parts: records a part of a corpus sent in several messages
            (:meth:`~memjobs_worker.knowledge.parts.CorpusParts.record`); without
            it, a part removes nothing.
        cache: where each embedded batch is kept at once, and read back by a
            retry (None: vectors live only until the corpus is written).

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
            resolved = resolve(doc, payload.allowed_roots, knowledge)
            total_chars += len(resolved.text)
            if total_chars > knowledge.max_corpus_chars:
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
        pieces = chunk_text(
            resolved.text,
            size_chars=knowledge.chunk_chars,
            overlap_chars=knowledge.chunk_overlap_chars,
        )
        plans.append((resolved, digest, [StoredChunk(c.index, c.text, chunk_hash(c.text), None) for c in pieces]))
    if embed is not None and dims is not None:
        plans = _embed(plans, store, owner, embed, dims, knowledge.embed_batch, report, cache)

    # Phase 2: write, one document at a time.
    for resolved, digest, chunks in plans:
        try:
            store.put_document(
                owner, resolved.doc_id, resolved.title, resolved.source_label, digest, chunks, chars=len(resolved.text)
            )
        except InvalidPayload:
            refusals.append(Refused(resolved.doc_id, resolved.title, "invalid_text"))
            continue
        report.indexed += 1
        report.chunks += len(chunks)
    for refusal in refusals:
        store.refuse_document(owner, refusal.doc_id, _storable(refusal.title), refusal.reason)
        report.refused[refusal.doc_id] = refusal.reason
    keep: set[str] | None = {r.doc_id for r, _ in corpus} | {r.doc_id for r in refusals}
    if payload.part is not None:
        keep = parts(owner, payload.part, keep) if parts is not None and keep is not None else None
    if keep is None:
        report.complete = False
    else:
        report.removed = store.remove_documents_except(owner, keep)
    if cache is not None:  # what it held is in the corpus now (or no longer wanted)
        cache.forget(owner, None if report.complete else {c.chunk_hash for _, _, chunks in plans for c in chunks})
    return report


def _storable(title: str) -> str:
    """A title the store takes whatever it was (no NUL), for recording a refusal."""
    return title.replace("\x00", "").strip()[:300] or "document"


def _embed(
    plans: list[tuple[Resolved, str, list[StoredChunk]]],
    store: KnowledgeStore,
    owner: str,
    embed: EmbedBatch,
    dims: int,
    batch: int,
    report: ReindexReport,
    cache: EmbeddingCache | None,
) -> list[tuple[Resolved, str, list[StoredChunk]]]:
    hashes = {c.chunk_hash for _, _, chunks in plans for c in chunks}
    known = store.chunk_embeddings(owner, hashes, dims)
    if cache is not None:
        cached = cache.get(owner, hashes - known.keys())
        report.cached_chunks = len(cached)
        known.update(cached)
    missing: dict[str, str] = {}
    for _, _, chunks in plans:
        for c in chunks:
            if c.chunk_hash not in known:
                missing.setdefault(c.chunk_hash, c.text)
    pending = list(missing.items())
    if pending:  # progress: counts only (no owner, no text)
        log.info("reindex embedding", extra={"to_embed": len(pending), "cached": report.cached_chunks})
    last_log = time.monotonic()
    for start in range(0, len(pending), batch):
        part = pending[start : start + batch]
        vectors = embed([text for _, text in part])
        report.embedding_calls += 1
        report.embedded_chunks += len(part)
        fresh = {h: v for (h, _), v in zip(part, vectors, strict=True)}
        if cache is not None:
            cache.put(owner, fresh)
        known.update(fresh)
        if time.monotonic() - last_log >= PROGRESS_EVERY_S:
            last_log = time.monotonic()
            log.info("reindex embedding", extra={"embedded": report.embedded_chunks, "to_embed": len(pending)})
    return [
        (r, d, [StoredChunk(c.index, c.text, c.chunk_hash, known[c.chunk_hash]) for c in chunks])
        for r, d, chunks in plans
    ]
