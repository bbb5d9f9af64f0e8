"""Session end and what follows it: ``/v1/sessions/{session_id}/end``,
``/v1/sessions`` (digests with live task status), ``/v1/tasks/{task_id}``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Path, Query

from memjobs_client.contracts import ACTOR_CONSOLIDATE, ACTOR_DIGEST, Turn
from memjobs_client.sensitive import redact_secrets
from memjobs_worker.http.auth import needs
from memjobs_worker.http.body import JsonRoute
from memjobs_worker.http.context import ensure_wanted
from memjobs_worker.http.problems import ProblemError
from memjobs_worker.http.routes import COMMON, Ctx, OwnerKey, errors
from memjobs_worker.http.schemas import (
    EndSessionRequest,
    SessionDigest,
    SessionEndAccepted,
    Sessions,
    TaskAccepted,
    TaskUpdate,
)

router = APIRouter(prefix="/v1", tags=["sessions"], dependencies=[needs("session")], route_class=JsonRoute)

SessionId = Path(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f]+$")
TaskId = Path(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f]+$")


def check_transcript_bytes(turns: Sequence[Turn], limit: int) -> None:
    """Refuse a transcript whose turns hold more than ``limit`` bytes of UTF-8 text,
    before any of it is scanned for credentials (encoding is linear and cheap; the
    scan is neither: a 960 KB transcript held the event loop for 70 s).

    Raises:
        ProblemError: ``validation``, naming the size, the cap and its setting.
    """
    size = sum(len(t.text.encode("utf-8", "surrogatepass")) for t in turns)
    if size > limit:
        raise ProblemError(
            "validation", f"transcript: {size} bytes, over the limit of {limit} bytes (MEMJOBS_MAX_TRANSCRIPT_BYTES)"
        )


def _redacted(body: EndSessionRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The turns and tasks as JSON, secrets blanked out, one turn at a time (in the
    computing thread: it stops between turns once the request is gone)."""
    transcript = []
    for turn in body.transcript:
        ensure_wanted()
        transcript.append({**turn.model_dump(mode="json"), "text": redact_secrets(turn.text)})
    tasks = [{**t.model_dump(mode="json"), "goal": redact_secrets(t.goal)} for t in body.tasks]
    return transcript, tasks


@router.post(
    "/sessions/{session_id:path}/end",
    status_code=202,
    response_model=SessionEndAccepted,
    responses=errors(*COMMON, "not_found"),
)  # a line break in the id routes nowhere
async def end_session(body: EndSessionRequest, c: Ctx, session_id: str = SessionId) -> SessionEndAccepted:
    """Queue consolidation, the digest and an extraction nudge for the session.

    By default both are queued and the workers decide with their own settings
    (no model configured or switched off there: skipped, not failed);
    ``"consolidate": false`` / ``"digest": false`` opt out. Each job is queued once
    per (owner, session), even when ended twice at once: a second end queues only
    what the first did not (``already_ended`` when that is nothing). A secret in
    a turn or a task goal is replaced by ``[REDACTED]`` before anything is enqueued.

    A transcript over ``MEMJOBS_MAX_TRANSCRIPT_BYTES`` is refused (``validation``)
    before any of it is scanned; the redaction runs off the event loop, and stops
    when the request is gone."""
    check_transcript_bytes(body.transcript, c.client.max_transcript_bytes)
    transcript, tasks = await c.compute(_redacted, body)
    sent = await c.call(
        c.client.end_session,
        body.owner_id,
        session_id,
        transcript,
        tasks,
        consolidate=body.consolidate,
        digest=body.digest,
    )
    opted_out = [
        actor for actor, wanted in ((ACTOR_CONSOLIDATE, body.consolidate), (ACTOR_DIGEST, body.digest)) if not wanted
    ]
    return SessionEndAccepted(
        session_id=session_id, enqueued=sent, opted_out=opted_out, status="queued" if sent else "already_ended"
    )


@router.get("/sessions", response_model=Sessions, responses=errors(*COMMON))
async def sessions(
    key: OwnerKey, c: Ctx, days: int = Query(default=7, ge=1, le=365), limit: int = Query(default=50, ge=1, le=1000)
) -> Sessions:
    """The owner's session digests of the last ``days`` days, newest first, each
    task's status read live from the task ledger."""
    cap = min(limit, c.api.max_listing)
    found = await c.call(lambda: c.parts.sessions.recall_sessions(key, days))
    return Sessions(
        sessions=[SessionDigest.model_validate(s.as_dict()) for s in found[:cap]], truncated=len(found) > cap
    )


@router.put(
    "/tasks/{task_id:path}", status_code=202, response_model=TaskAccepted, responses=errors(*COMMON, "not_found")
)  # a line break in the id routes nowhere
async def put_task(body: TaskUpdate, c: Ctx, task_id: str = TaskId) -> TaskAccepted:
    """Report a task's status to the task ledger (read live by session recall)."""
    await c.call(lambda: c.client.record_task(body.owner_id, task_id, redact_secrets(body.goal), body.status))
    return TaskAccepted(task_id=task_id, status="queued")
