"""Chunk ids that cite one version of a chunk, and reading a cited chunk back.

What: :func:`chunk_id` names a search result's chunk as
``<doc_id>#<chunk_index>@<hash>``, where ``hash`` is the first
:data:`HASH_CHARS` hex digits of :func:`~memjobs_worker.knowledge.chunking.chunk_hash`
of its text. :func:`read_cited` reads back the chunk an id names, among one
owner's chunks only, and says ``not_found`` or ``stale`` when it can no longer
be cited.

Why the hash is part of the id: a re-index replaces a document whole, and a
chunk at the same position may then hold other words. An id naming the
position alone would show new text under an old citation; with the hash, the
text read back is the text the recall saw, or the answer is ``stale``.

Why re-validate at read time and not trust the id: the id comes back from a
model or an agent. The document may have been removed (the owner re-indexed
without it, which is also how consent is withdrawn: nothing is indexed without
it), refused since, or belong to another owner; each reads as ``not_found``,
never as another owner's text. A malformed id is ``not_found`` too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import sqlalchemy as sa

from memjobs_worker.db.connect import transaction
from memjobs_worker.knowledge.chunking import chunk_hash
from memjobs_worker.knowledge.schema import knowledge_chunks, knowledge_documents
from memjobs_worker.knowledge.store import KnowledgeStore

#: Hex digits of the chunk hash kept in an id (64 bits).
HASH_CHARS = 16
#: The longest id accepted (a document id is at most a few hundred characters).
MAX_CHUNK_ID_CHARS = 600

_ID = re.compile(rf"(?P<doc>[^\x00]+)#(?P<index>\d{{1,7}})@(?P<hash>[0-9a-f]{{{HASH_CHARS}}})")

CitedStatus = Literal["ok", "not_found", "stale"]


@dataclass(frozen=True)
class CitedChunk:
    """A cited chunk read back: its text, title and public label when ``ok``."""

    status: CitedStatus
    text: str = ""
    title: str = ""
    source: str = ""


def chunk_id(doc_id: str, chunk_index: int, text: str) -> str:
    """The id that cites this version of the chunk (see the module docstring)."""
    return f"{doc_id}#{chunk_index}@{chunk_hash(text)[:HASH_CHARS]}"


def read_cited(store: KnowledgeStore, owner_key: str, cited: str) -> CitedChunk:
    """The chunk ``cited`` names among the owner's chunks, checked now.

    Returns:
        ``ok`` with the text; ``not_found`` when the id is malformed or the
        owner has no indexed document of that id; ``stale`` when the document
        is still indexed but that chunk is gone or its text changed.

    Raises:
        BackendUnavailable: the database did not answer.
    """
    match = _ID.fullmatch(cited) if len(cited) <= MAX_CHUNK_ID_CHARS else None
    if match is None:
        return CitedChunk("not_found")
    doc_id, index = match.group("doc"), int(match.group("index"))
    c, d = knowledge_chunks.c, knowledge_documents.c
    with transaction(store.engine) as conn:
        document = conn.execute(
            sa.select(d.title, d.source_label, d.state).where(d.owner_key == owner_key, d.doc_id == doc_id)
        ).first()
        if document is None or document.state != "indexed":
            return CitedChunk("not_found")
        row = conn.execute(
            sa.select(c.text).where(c.owner_key == owner_key, c.doc_id == doc_id, c.chunk_index == index)
        ).first()
    if row is None or chunk_hash(row.text)[:HASH_CHARS] != match.group("hash"):
        return CitedChunk("stale")
    return CitedChunk("ok", text=row.text, title=document.title, source=document.source_label)
