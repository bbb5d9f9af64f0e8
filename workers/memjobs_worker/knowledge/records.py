"""The values the knowledge store takes and returns."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

DocumentState = Literal["indexed", "refused"]


@dataclass(frozen=True)
class StoredChunk:
    """A chunk to store: its text, :func:`~memjobs_worker.knowledge.chunking.chunk_hash`
    and embedding (``None`` when no embedding service is configured)."""

    index: int
    text: str
    chunk_hash: str
    embedding: list[float] | None


@dataclass(frozen=True)
class DocumentRecord:
    """What the store knows of one document.

    ``content_hash`` lets an ingest skip unchanged documents; ``reason`` says
    why a refused document was refused; ``chars`` is its length in characters
    and ``chunks`` how many chunks are stored for it (0 when refused).
    """

    doc_id: str
    title: str
    source_label: str
    content_hash: str | None
    state: DocumentState
    reason: str | None
    chars: int
    chunks: int
    updated_at: datetime


@dataclass(frozen=True)
class ChunkHit:
    """One chunk found by a search, with its document's title and public label.

    ``rank`` is the ranking's own score (``ts_rank_cd`` for keywords, cosine
    similarity for vectors, 0.0 for the unranked substring fallback); only the
    order is comparable across rankings.
    """

    doc_id: str
    chunk_index: int
    text: str
    title: str
    source_label: str
    rank: float
