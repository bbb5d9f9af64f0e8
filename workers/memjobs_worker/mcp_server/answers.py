"""What the tools answer, and the bounds that keep every answer small.

What: the pydantic models the SDK turns into each tool's output schema
(:class:`RecallAnswer`, :class:`ChunkAnswer` with its :class:`Citation`), and
:func:`recall_answer` / :func:`chunk_answer` that build them from a search
outcome or a chunk read back, cut to the bounds below.

Why bounded here and not by the search: the search serves the CLI and the
HTTP API too (up to 50 whole chunks); an answer bound for a model's context
must be small whatever the corpus holds. Every result carries
``trust: "untrusted_external"`` and the document's public label, never a path.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field

from memjobs_worker.knowledge.citations import CitedChunk
from memjobs_worker.knowledge.search import KnowledgeResult, SearchOutcome

Trust = Literal["untrusted_external"]

#: The most results one recall returns.
MAX_RECALL_K = 10
#: A snippet is cut to this many characters.
SNIPPET_CHARS = 480
#: A title (and a source label) is cut to this many characters.
TITLE_CHARS = 160
#: A recall's results, as JSON, fit in this many bytes: the lowest-ranked go first.
MAX_RECALL_BYTES = 12_000
#: The text get_chunk returns is cut to this many characters.
MAX_CHUNK_CHARS = 6_000
#: A citation's quote is cut to this many characters (with its title and
#: label, a citation stays under about 1 KB).
QUOTE_CHARS = 200


class RecallHit(BaseModel):
    """One passage of the user's documents."""

    chunk_id: str = Field(description="cites this version of the passage (get_chunk reads it back)")
    title: str = Field(description="the document's title")
    source: str = Field(description="the document's public label (doc:<id> or file:<name>), never a path")
    snippet: str = Field(description=f"the passage, at most {SNIPPET_CHARS} characters")
    score: float = Field(description="relevance from 0 to 1: 1 when ranked first by both keywords and meaning")
    trust: Trust = "untrusted_external"


class RecallAnswer(BaseModel):
    """The passages found, best first."""

    results: list[RecallHit]
    mode: Literal["hybrid", "keyword"] = Field(description="how the passages were ranked")
    notice: str | None = Field(default=None, description="why the ranking was degraded, if it was")
    truncated: bool = Field(default=False, description="lower-ranked passages left out to keep the answer small")
    trust: Trust = "untrusted_external"


class Citation(BaseModel):
    """What to attach to an answer that uses the passage."""

    chunk_id: str
    title: str
    source: str
    quote: str = Field(description=f"the passage's first {QUOTE_CHARS} characters")


class ChunkAnswer(BaseModel):
    """One passage in full, as the recall that cited it saw it."""

    chunk_id: str
    text: str = Field(description=f"the passage, at most {MAX_CHUNK_CHARS} characters")
    truncated: bool = False
    citation: Citation
    trust: Trust = "untrusted_external"


def recall_answer(outcome: SearchOutcome) -> RecallAnswer:
    """The outcome's results as snippets, the lowest-ranked dropped past :data:`MAX_RECALL_BYTES`."""
    hits: list[RecallHit] = []
    size = 0
    for result in outcome.results[:MAX_RECALL_K]:
        hit = _hit(result)
        size += len(json.dumps(hit.model_dump(), ensure_ascii=False).encode("utf-8"))
        if size > MAX_RECALL_BYTES:
            break
        hits.append(hit)
    return RecallAnswer(
        results=hits,
        mode=outcome.mode,
        notice=outcome.notice,
        truncated=len(hits) < min(len(outcome.results), MAX_RECALL_K),
    )


def chunk_answer(cited_id: str, chunk: CitedChunk) -> ChunkAnswer:
    """An ``ok`` chunk read back, its text and citation cut to their bounds."""
    citation = Citation(
        chunk_id=cited_id,
        title=cut(chunk.title, TITLE_CHARS),
        source=cut(chunk.source, TITLE_CHARS),
        quote=cut(_flat(chunk.text), QUOTE_CHARS),
    )
    return ChunkAnswer(
        chunk_id=cited_id,
        text=cut(chunk.text, MAX_CHUNK_CHARS),
        truncated=len(chunk.text) > MAX_CHUNK_CHARS,
        citation=citation,
    )


def cut(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _hit(result: KnowledgeResult) -> RecallHit:
    return RecallHit(
        chunk_id=result.chunk_id,
        title=cut(result.title, TITLE_CHARS),
        source=cut(result.source, TITLE_CHARS),
        snippet=cut(_flat(result.text), SNIPPET_CHARS),
        score=round(result.score, 6),
    )


def _flat(text: str) -> str:
    return " ".join(text.split())
