"""Personal memory, the remote protocol of the seeds' gateway:
``/v1/remember``, ``/v1/forget``, ``/v1/recall``, ``/v1/preferences``."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from memjobs_client.contracts import ForgetSource, owner_key
from memjobs_client.errors import InvalidPayload, MemoryOff
from memjobs_worker.http import auth
from memjobs_worker.http.context import ApiContext
from memjobs_worker.http.routes import COMMON, Ctx, OwnerKey, errors
from memjobs_worker.http.schemas import (
    ForgetAccepted,
    ForgetRequest,
    Memories,
    Memory,
    Preferences,
    RecallRequest,
    RememberAccepted,
    RememberRequest,
)

router = APIRouter(prefix="/v1", tags=["personal memory"], dependencies=[Depends(auth.gateway)])


def _key(owner_id: str) -> str:
    try:
        return owner_key(owner_id)
    except ValueError:
        raise InvalidPayload("owner_id: must be a non-empty string") from None


def _require_memory(c: ApiContext) -> None:
    if not c.settings.memory_enabled:
        raise MemoryOff("personal memory is off (NOVA_AUDIO_AGENT_MEMORY_PROVIDER=off)")


@router.post("/remember", status_code=202, response_model=RememberAccepted,
             responses=errors(*COMMON, "sensitive_content", "memory_off"))
async def remember(body: RememberRequest, c: Ctx) -> JSONResponse:
    """Queue a source for the owner's ledger (pending, then learned by extraction).

    The source id is a function of (owner, text): the same words are stored once."""
    source_id = await c.call(c.client.remember, body.owner_id, body.text,
                             session_id=body.session_id, kind=body.kind)
    # The hot path: a ready response skips FastAPI's re-validation of the model.
    return JSONResponse({"source_id": source_id, "status": "queued"}, status_code=202)


@router.post("/forget", status_code=202, response_model=ForgetAccepted,
             responses=errors(*COMMON, "memory_off"))
async def forget(body: ForgetRequest, c: Ctx) -> ForgetAccepted:
    """Forget a source at once (recall stops returning its memories before this
    answers); the purge of the memories derived from it is queued."""
    _require_memory(c)
    payload = ForgetSource(owner_key=_key(body.owner_id), source_id=body.source_id)
    result = await c.call(c.runtime.store.forget, payload.owner_key, payload.source_id,
                          sent_at=datetime.now(UTC))
    await c.call(c.client.forget, body.owner_id, body.source_id)
    if result.relearn:
        # Sources that shared a deleted memory are pending again: learn them again.
        await c.call(c.runtime.scheduler.schedule, payload.owner_key, "forget", force=True)
    return ForgetAccepted(source_id=body.source_id, status="forgotten", purge="queued")


@router.post("/recall", response_model=Memories, responses=errors(*COMMON, "memory_off"))
async def recall(body: RecallRequest, c: Ctx) -> Memories:
    """Search the owner's learned memories (only those whose sources are all learned)."""
    key = _key(body.owner_id)
    _require_memory(c)
    hits = await c.call(lambda: c.runtime.pipeline.recall(key, body.query, body.limit))
    return Memories(memories=[Memory(memory_id=h.memory_id, text=h.text, score=h.score,
                                     source_ids=h.source_ids) for h in hits])


@router.get("/preferences", response_model=Preferences, responses=errors(*COMMON))
async def preferences(key: OwnerKey, c: Ctx) -> Preferences:
    """The owner's USER.md, read through the memory service, and its version (0: never written)."""
    doc = await c.call(lambda: c.runtime.memory_docs.read(key, "USER.md"))
    return Preferences(doc="USER.md", version=doc.version, content=doc.content)
