"""The optional knowledge corpus (K): documents the user submits, searched by
keywords and vectors merged by reciprocal rank fusion (DESIGN.md, "Knowledge (K)").

Nothing here touches the database until :func:`ensure_schema` runs, so a
switched-off knowledge feature leaves no tables behind. Results shown to the
model carry a public source label, never a path, and are ``untrusted_external``.
"""

from memjobs_worker.fulltext import TOKENIZER_VERSION, index_tokens, query_tokens
from memjobs_worker.knowledge.chunking import Chunk, chunk_hash, chunk_text
from memjobs_worker.knowledge.records import ChunkHit, DocumentRecord, DocumentState, StoredChunk
from memjobs_worker.knowledge.schema import ensure_schema
from memjobs_worker.knowledge.search import (
    RRF_K,
    KnowledgeResult,
    SearchOutcome,
    fuse,
    search_knowledge,
    search_with,
)
from memjobs_worker.knowledge.store import KnowledgeStore

__all__ = [
    # chunking and tokens
    "Chunk",
    "chunk_text",
    "chunk_hash",
    "index_tokens",
    "query_tokens",
    "TOKENIZER_VERSION",
    # storage
    "ensure_schema",
    "KnowledgeStore",
    "StoredChunk",
    "DocumentRecord",
    "DocumentState",
    "ChunkHit",
    # search
    "search_knowledge",
    "search_with",
    "SearchOutcome",
    "KnowledgeResult",
    "fuse",
    "RRF_K",
]
