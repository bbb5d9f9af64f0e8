"""The console's job lists and a job's page.

``GET /console/jobs?state=…&queue=…&q=…&cursor=…`` lists the jobs in one
state — queued, delayed, in flight, retrying, dead — a page of
:data:`PAGE` at a time, searchable by message id, actor or owner-key prefix
(:func:`memjobs_worker.ops.jobs.matches`; never the payload's text). Queued,
delayed, in-flight and dead jobs are Dramatiq's stored messages, read a page
at a time (:func:`memjobs_worker.broker.page_messages`: a page costs the same
with ten or a hundred thousand queued); the retrying ones are the workers'
record (:mod:`memjobs_worker.observability.retrying`). ``/console/dead-letters``
is the dead list, with Retry and Purge.

``GET /console/jobs/{id}`` (a message id or the broker's id) shows one job:
actor, queue, state, attempts, reason, times, the owner-key prefix and its
payload's outline (ids and enumerations; every text replaced by its length),
and on which worker it runs, for how long.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from memjobs_client.contracts import QUEUES
from memjobs_worker import broker as stored
from memjobs_worker.http.console import common
from memjobs_worker.http.console.common import ctx, finish, page_session, render
from memjobs_worker.observability.retrying import RetryingJob, RetryingRecord
from memjobs_worker.observability.running import running_jobs
from memjobs_worker.ops import jobs
from memjobs_worker.ops.status import queue_stats

router = APIRouter(prefix="/console", include_in_schema=False)

#: Jobs on a page.
PAGE = 50
#: The states, in the order of the tabs.
STATES = ("queued", "delayed", "in_flight", "retrying", "dead")


def _retrying_job(job: RetryingJob) -> jobs.Job:
    return jobs.Job(
        job.message_id,
        "",
        job.queue,
        "retrying",
        job.actor,
        job.failures,
        job.reason,
        None,
        None,
        None,
        jobs.at_ms(job.failed_ms),
        None,
        0,
        None,
        None,
    )


def _list(client: Any, state: str, queue: str | None, term: str, cursor: str | None, stale_ms: int) -> dict[str, Any]:
    counts = queue_stats(client)
    if state == "retrying":
        offset = int(cursor) if cursor and cursor.isdigit() else 0
        record = RetryingRecord(client)
        rows = [_retrying_job(j) for j in record.page(stale_after_ms=stale_ms, offset=offset, count=PAGE)]
        found = [j for j in rows if (queue is None or j.queue == queue) and (not term or jobs.matches(j, term))]
        return {
            "jobs": found,
            "cursor": str(offset + PAGE) if len(rows) == PAGE else None,
            "scanned": len(rows),
            "counts": counts,
        }

    def accept(m: stored.StoredMessage) -> bool:
        return not term or jobs.matches(jobs.job_of(m.queue, m.state, m.redis_id, m.data, m.score), term)

    page = stored.page_messages(client, state, queue=queue, cursor=cursor, want=PAGE, accept=accept if term else None)
    found = [jobs.job_of(m.queue, m.state, m.redis_id, m.data, m.score) for m in page.messages]
    return {"jobs": found, "cursor": page.cursor, "scanned": page.scanned, "counts": counts}


async def _jobs_page(request: Request, state: str, page: str) -> Response:
    found = await page_session(request)
    if isinstance(found, Response):
        return found
    _, cookie, csrf = found
    params = request.query_params
    queue = params.get("queue") or None
    queue = queue if queue in QUEUES else None
    term = params.get("q", "").strip()[:100]
    cursor = params.get("cursor") or None
    c = ctx(request)
    try:
        values = await c.call(_list, c.client.broker.client, state, queue, term, cursor, c.stale_after_ms)
        problem = None
    except ValueError:
        values, problem = {}, "not_a_cursor"
    except Exception as exc:  # noqa: BLE001 - the page says so, never with a traceback
        values, problem = {}, getattr(exc, "reason", None) or "backend_unavailable"
    base = {k: v for k, v in (("state", state if page == "jobs" else None), ("queue", queue), ("q", term)) if v}
    path = "/console/jobs" if page == "jobs" else "/console/dead-letters"
    query = urlencode({**base, **({"cursor": cursor} if cursor else {})})
    here = f"{path}?{query}" if query else path
    next_cursor = values.get("cursor")
    response = render(
        "jobs.html",
        page=page,
        state=state,
        states=STATES,
        queue=queue,
        queues=QUEUES,
        term=term,
        problem=problem,
        csrf=csrf,
        open=c.tokens.open,
        now=time.time(),
        refresh_s=common.refresh_of(request),
        done=params.get("done", "")[:80],
        here=here,
        first=cursor is not None,
        first_url=f"{path}?{urlencode(base)}" if base else path,
        next_url=None if not next_cursor else f"{path}?{urlencode({**base, 'cursor': next_cursor})}",
        min_term=jobs.MIN_TERM,
        **values,
    )
    return finish(response, request, cookie)


@router.get("/jobs")
async def jobs_page(request: Request) -> Response:
    state = request.query_params.get("state", "queued")
    return await _jobs_page(request, state if state in STATES else "queued", "jobs")


@router.get("/dead-letters")
async def dead_page(request: Request) -> Response:
    return await _jobs_page(request, "dead", "dead")


def _detail(client: Any, ident: str) -> dict[str, Any]:
    message = stored.find_message(client, ident)
    job = (
        None
        if message is None
        else jobs.job_of(message.queue, message.state, message.redis_id, message.data, message.score)
    )
    message_id = job.message_id if job is not None else ident
    retrying = RetryingRecord(client).get(message_id)
    if job is None and retrying is not None:
        job = _retrying_job(retrying)
    running = [r for r in running_jobs(client) if r.message_id == message_id]
    return {"job": job, "retrying": retrying, "running": running[0] if running else None}


@router.get("/jobs/{ident}")
async def job_page(request: Request, ident: str) -> Response:
    found = await page_session(request)
    if isinstance(found, Response):
        return found
    _, cookie, csrf = found
    c = ctx(request)
    ident = ident.strip()[:64]
    try:
        values = await c.call(_detail, c.client.broker.client, ident)
        problem = None
    except Exception as exc:  # noqa: BLE001 - the page says so, never with a traceback
        values, problem = {"job": None}, getattr(exc, "reason", None) or "backend_unavailable"
    status = 404 if values["job"] is None and problem is None else 200
    response = render(
        "job.html",
        status=status,
        page="job",
        ident=ident,
        problem=problem,
        csrf=csrf,
        open=c.tokens.open,
        now=time.time(),
        here=f"/console/jobs/{ident}",
        done=request.query_params.get("done", "")[:80],
        looked=2 * stored.PAGE_BUDGET,
        **values,
    )
    return finish(response, request, cookie)
