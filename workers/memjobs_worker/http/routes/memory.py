"""Personal memory, the remote protocol of the seeds' gateway:
``/v1/remember``, ``/v1/forget``, ``/v1/recall``, ``/v1/preferences``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from memjobs_worker.http.auth import needs
from memjobs_worker.http.body import JsonRoute
from memjobs_worker.http.problems import ProblemError
from memjobs_worker.http.routes import COMMON, Ctx, OwnerId, check_query_chars, errors, owner_key_of
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

#: Characters of a remembered text beyond which its checks run on the computing thread.
LONG_TEXT_CHARS = 2000

router = APIRouter(prefix="/v1", tags=["personal memory"], route_class=JsonRoute)

#: The problem replies of a route that takes a person's text: the text may hold a
#: credential, and memory may be off.
_TEXT_ROUTE_ERRORS = (*COMMON, "sensitive_content", "memory_off")


@router.post(
    "/remember",
    status_code=202,
    dependencies=[needs("write")],
    response_model=RememberAccepted,
    responses=errors(*_TEXT_ROUTE_ERRORS),
)
async def remember(body: RememberRequest, c: Ctx) -> JSONResponse:
    """Queue a source for the owner's ledger (pending, then learned by extraction).

    The source id is a function of (owner, text): the same words are stored once."""
    # A long text's credential check costs CPU by the kilobyte (seconds for 32 KB of
    # digits): on the one computing thread, so that a flood of them does not fight
    # every other owner's requests for the GIL from all the backend threads.
    run = c.compute if len(body.text) > LONG_TEXT_CHARS else c.call
    source_id = await run(c.client.remember, body.owner_id, body.text, session_id=body.session_id, kind=body.kind)
    # The hot path: a ready response skips FastAPI's re-validation of the model.
    return JSONResponse({"source_id": source_id, "status": "queued"}, status_code=202)


@router.post(
    "/forget",
    status_code=202,
    dependencies=[needs("forget")],
    response_model=ForgetAccepted,
    responses=errors(*COMMON, "memory_off", "not_found"),
)
async def forget(body: ForgetRequest, c: Ctx) -> ForgetAccepted:
    """Forget a source at once (recall stops returning its memories before this
    answers); the purge of the memories derived from it is queued.

    ``already_forgotten`` for a source forgotten before; a source id this owner
    never sent (not in its ledger, no remember of its queued) is ``not_found``
    (404), as the CLI says, another owner's source with this id included (it
    is never touched). A forget sent while the source's own remember is still
    queued is ``forgotten``: the remember will find it so. Decided in a bounded
    number of reads whatever the backlog."""
    outcome = await c.call(c.memory.forget, body.owner_id, body.source_id)
    if outcome.status == "not_found":
        raise ProblemError("not_found", "this owner has no such source")
    assert outcome.status in ("forgotten", "already_forgotten") and outcome.purge == "queued"
    return ForgetAccepted(source_id=outcome.source_id, status=outcome.status, purge=outcome.purge)


@router.post(
    "/recall",
    dependencies=[needs("read")],
    response_model=Memories,
    responses=errors(*_TEXT_ROUTE_ERRORS, "model_busy"),
)
async def recall(body: RecallRequest, c: Ctx) -> Memories:
    """Search the owner's learned memories (only those whose sources are all learned).

    A query that looks like a credential is refused (``sensitive_content``) before
    anything is embedded, as a knowledge search's is: it never reaches the model service.
    A query over ``MEMJOBS_API_MAX_QUERY_CHARS`` characters is refused (``validation``);
    an owner whose earlier recalls and searches still hold its share of the model
    gets ``model_busy`` (429), other owners are served meanwhile."""
    check_query_chars(body.query, c.api.max_query_chars)
    hits = await c.call_model(key := owner_key_of(body.owner_id), c.memory.recall, key, body.query, body.limit)
    return Memories(
        memories=[Memory(memory_id=h.memory_id, text=h.text, score=h.score, source_ids=h.source_ids) for h in hits]
    )


@router.get("/preferences", dependencies=[needs("read")], response_model=Preferences, responses=errors(*COMMON))
async def preferences(owner: OwnerId, c: Ctx) -> Preferences:
    """The owner's USER.md, read through the memory service, and its version (0: never written)."""
    doc = await c.call(lambda: c.parts.memory_docs.read(owner, "USER.md"))
    return Preferences(doc="USER.md", version=doc.version, content=doc.content)
