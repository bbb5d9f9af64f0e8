"""An owner's whole data, for operators (host token, ``admin``): erase it
everywhere (``DELETE /v1/owners``) and export it (``GET /v1/owners/export``).

The owner is named by ``X-Memjobs-Owner``, as on every GET route: an owner id
never goes in a URL, so it is in no access log (docs/data-lifecycle.md).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from memjobs_worker.http.auth import needs
from memjobs_worker.http.body import JsonRoute
from memjobs_worker.http.routes import COMMON, Ctx, OwnerId, errors
from memjobs_worker.lifecycle import Owner

router = APIRouter(
    prefix="/v1/owners", tags=["operations"], dependencies=[needs("admin", per_owner=False)], route_class=JsonRoute
)

#: The export's media type: one JSON document per line.
JSON_LINES = "application/x-ndjson"


class Erased(BaseModel):
    status: str = Field(description="erased")
    erasure_id: int = Field(description="the row of owner_erasures recording the counts (no owner)")
    counts: dict[str, int] = Field(description="records dropped, by store")
    total: int


@router.delete("", response_model=Erased, responses=errors(*COMMON, "erase_incomplete"))
async def erase(owner_id: OwnerId, c: Ctx) -> Erased:
    """Erase the owner from every store: sources and their text, memories and vectors,
    USER.md / MEMORY.md, digests, tasks, session runs, knowledge, the memory audit's
    rows, queued and dead-lettered jobs, Redis keys. Idempotent: call it again after a
    503 (it finishes what is left). Only counts stay."""
    report = await c.call(c.erase_owner, Owner.of(owner_id))
    return Erased(**report.as_dict())


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={
        **errors(*COMMON),
        200: {
            "description": "the export, JSON Lines: a header, then one record per line",
            "content": {JSON_LINES: {"schema": {"type": "string"}}},
        },
    },
)
async def export(owner_id: OwnerId, c: Ctx) -> Any:
    """Everything memjobs holds about the owner, as JSON Lines (format
    ``memjobs-owner-export``, docs/data-lifecycle.md)."""
    lines = await c.call(c.export_owner, Owner.of(owner_id))
    return StreamingResponse(
        iter(lines),
        media_type=JSON_LINES,
        headers={"Content-Disposition": 'attachment; filename="memjobs-export.jsonl"', "Cache-Control": "no-store"},
    )
