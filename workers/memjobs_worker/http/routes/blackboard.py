"""A session's L0 blackboard over HTTP, for gateways on any host.

- ``POST /v1/sessions/{session_id}/blackboard``: append entries (the
  ``append_blackboard`` job, idempotent by entry id) → 202; a credential in
  any field refuses the request (``sensitive_content``) and nothing is queued.
- ``GET /v1/sessions/{session_id}/blackboard`` (the owner in
  ``X-Memjobs-Owner``): the session's live entries in event order, a page at a
  time (``after_seq`` and ``after_id`` continue after the last one).

The ``session`` scope, like the other session routes.
"""

from __future__ import annotations

from fastapi import APIRouter, Query

from memjobs_client.blackboard import SessionBlackboard
from memjobs_worker.http.auth import needs
from memjobs_worker.http.body import JsonRoute
from memjobs_worker.http.problems import ProblemError
from memjobs_worker.http.routes import COMMON, Ctx, OwnerKey, errors
from memjobs_worker.http.routes.sessions import SessionId
from memjobs_worker.http.schemas import (
    BIGINT_MAX,
    BlackboardAppended,
    BlackboardAppendRequest,
    BlackboardCursor,
    BlackboardEntry,
    BlackboardPage,
)
from memjobs_worker.sessions.blackboard import MAX_PAGE_ENTRIES

router = APIRouter(prefix="/v1", tags=["sessions"], dependencies=[needs("session")], route_class=JsonRoute)


@router.post(
    "/sessions/{session_id:path}/blackboard",
    status_code=202,
    response_model=BlackboardAppended,
    responses=errors(*COMMON, "sensitive_content", "redis_full", "not_found"),
)
async def append_blackboard(body: BlackboardAppendRequest, c: Ctx, session_id: str = SessionId) -> BlackboardAppended:
    """Queue entries for the session's blackboard: idempotent by entry id, read back
    in event order (``seq``) whatever order they arrive in; kept within the seeds'
    limits (7 days per entry, 1,000 entries, 8 MB per session, the oldest dropped
    first). A field that looks like a credential refuses the whole request."""
    board = SessionBlackboard(c.client)
    entries = [e.model_dump(mode="json") for e in body.entries]
    payloads = await c.compute(board.payloads, body.owner_id, session_id, entries)
    await c.call(board.send, payloads)
    return BlackboardAppended(session_id=session_id, entries=len(entries), status="queued")


@router.get(
    "/sessions/{session_id:path}/blackboard", response_model=BlackboardPage, responses=errors(*COMMON, "not_found")
)
async def restore_blackboard(
    key: OwnerKey,
    c: Ctx,
    session_id: str = SessionId,
    after_seq: int | None = Query(default=None, ge=0, le=BIGINT_MAX),
    after_id: str | None = Query(default=None, min_length=1, max_length=128),
    limit: int = Query(default=MAX_PAGE_ENTRIES, ge=1, le=MAX_PAGE_ENTRIES),
) -> BlackboardPage:
    """The session's live entries (the owner's only), in event order, one page
    (at most ``limit`` entries and about 512 KiB); ``next_after`` continues."""
    if (after_seq is None) != (after_id is None):
        raise ProblemError("validation", "after_seq and after_id: give both, or neither")
    after = (after_seq, after_id) if after_seq is not None and after_id is not None else None
    page = await c.call(lambda: c.parts.blackboard.page(key, session_id, after=after, limit=limit))
    cursor = BlackboardCursor(seq=page.next_after[0], entry_id=page.next_after[1]) if page.next_after else None
    return BlackboardPage(
        session_id=session_id, next_after=cursor, entries=[BlackboardEntry.model_validate(e) for e in page.entries]
    )
