"""The owner's own view: ``/v1/sources`` (the ledger) and ``/v1/memories`` (learned memories)."""

from __future__ import annotations

from fastapi import APIRouter, Query

from memjobs_worker.http.auth import needs
from memjobs_worker.http.body import JsonRoute
from memjobs_worker.http.routes import COMMON, Ctx, OwnerKey, errors
from memjobs_worker.http.schemas import Memories, Memory, SourceOut, Sources

router = APIRouter(prefix="/v1", tags=["reads"], dependencies=[needs("read")], route_class=JsonRoute)

Limit = Query(
    default=100,
    ge=1,
    le=1000,
    description="at most this many (and at most MEMJOBS_API_MAX_LISTING); truncated=true says there were more",
)


@router.get("/sources", response_model=Sources, responses=errors(*COMMON))
async def sources(key: OwnerKey, c: Ctx, limit: int = Limit, include_text: bool = Query(default=False)) -> Sources:
    """The owner's sources with their states (text only when asked for)."""
    cap = min(limit, c.api.max_listing)
    rows = await c.call(c.memory.sources, key)
    listing = [
        SourceOut(
            source_id=r.source_id,
            state=r.state,
            kind=r.kind,
            session_id=r.session_id,
            created_at=r.created_at,
            learned_at=r.learned_at,
            reason=r.reason,
            text=r.text if include_text else None,
        )
        for r in rows[:cap]
    ]
    return Sources(sources=listing, truncated=len(rows) > cap)


@router.get("/memories", response_model=Memories, responses=errors(*COMMON, "memory_off"))
async def memories(key: OwnerKey, c: Ctx, limit: int = Limit) -> Memories:
    """The owner's learned memories, each with the sources it came from."""
    cap = min(limit, c.api.max_listing)
    hits = await c.call(c.memory.memories, key)
    return Memories(
        memories=[
            Memory(memory_id=h.memory_id, text=h.text, score=h.score, source_ids=h.source_ids) for h in hits[:cap]
        ],
        truncated=len(hits) > cap,
    )
