"""The console's overview, its login and logout, and its form actions.

``GET /console`` shows the queues (with Pause and Resume), what each worker
runs now and for how long, throughput, failure and run-time graphs over the
last hour or day, sources by state, recent outcomes and failure reasons. The
job lists and a job's page are :mod:`~.jobs`. Pages refresh themselves every
:data:`~.common.REFRESH_S` seconds by fetching themselves again and swapping
their live part (the filters, the search and the ticked letters stay).

Actions are POSTed forms carrying the CSRF token; each answers with a 303 back
to the page it came from, saying what it did. Retry all and Purge all act on
the letters the page showed (their ids are in the form), never on letters
that arrived since, and only once confirmed: the page's script asks, and
without a script the server shows a confirmation page first.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from memjobs_client.contracts import QUEUES
from memjobs_worker.http.console import common
from memjobs_worker.http.console.charts import charts
from memjobs_worker.http.console.common import (
    HEADERS,
    SESSIONS_DOWN,
    SessionsDown,
    ctx,
    finish,
    page_session,
    render,
)
from memjobs_worker.http.console.session import COOKIE, is_host_token
from memjobs_worker.observability import timeline
from memjobs_worker.observability.running import running_jobs
from memjobs_worker.ops import overview
from memjobs_worker.ops.deadletters import DeadLetters
from memjobs_worker.ops.pauses import QueuePauses

router = APIRouter(prefix="/console", include_in_schema=False)

LOGOUT_NOT_RECORDED = (
    "Redis is not answering, so the logout was not recorded: this session "
    "is still valid. Log out again once Redis is back."
)
#: The pages an older form names by word.
_PAGES = {"overview": "/console", "dead": "/console/dead-letters"}
_PAST = {"retry": "retried", "purge": "purged"}
#: Letters a bulk action may name (a page shows fewer).
MAX_BULK = 200


def _overview(client: Any, store: Any, stale_ms: int, window: timeline.Window) -> dict[str, Any]:
    return {
        "view": overview.read(client, store, stale_after_ms=stale_ms),
        "paused": QueuePauses(client).paused(),
        "running": running_jobs(client),
        "charts": charts(timeline.read(client, window), window),
    }


@router.get("")
async def overview_page(request: Request) -> Response:
    found = await page_session(request)
    if isinstance(found, Response):
        return found
    _, cookie, csrf = found
    c = ctx(request)
    window = timeline.DAY if request.query_params.get("window") == "day" else timeline.HOUR
    try:
        values = await c.call(_overview, c.client.broker.client, c.parts.store, c.stale_after_ms, window)
        problem = None
    except Exception as exc:  # noqa: BLE001 - the page says so, never with a traceback
        values, problem = {"view": None}, getattr(exc, "reason", None) or "backend_unavailable"
    response = render(
        "overview.html",
        page="overview",
        problem=problem,
        csrf=csrf,
        queues=QUEUES,
        refresh_s=common.refresh_of(request),
        done=request.query_params.get("done", "")[:80],
        now=time.time(),
        open=c.tokens.open,
        window=window.name,
        **values,
    )
    return finish(response, request, cookie)


@router.get("/login")
async def login_page(request: Request) -> Response:
    if ctx(request).tokens.open:
        return RedirectResponse("/console", status_code=303, headers=HEADERS)
    return render("login.html", page="login", refused=False)


@router.post("/login")
async def login(request: Request) -> Response:
    tokens = ctx(request).tokens
    form = dict(await common.form_fields(request))
    if tokens.open:
        return RedirectResponse("/console", status_code=303, headers=HEADERS)
    if not is_host_token(tokens, form.get("token", "")):
        return render("login.html", status=403, page="login", refused=True)
    try:
        session, cookie = (await common.console_keys(request)).new_session()
        await common.on_sessions(request, lambda live: live.start(session))
    except SessionsDown:
        return common.unavailable(SESSIONS_DOWN)
    response = RedirectResponse("/console", status_code=303, headers=HEADERS)
    return common.set_cookie(response, request, cookie)


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End the session in Redis (a copy of the cookie stops working) and drop the cookie."""
    checked = await common.checked(request, down=LOGOUT_NOT_RECORDED)
    if isinstance(checked, Response):
        return checked
    session, _ = checked
    try:
        await common.on_sessions(request, lambda live: live.end(session))
    except SessionsDown:
        return common.unavailable(LOGOUT_NOT_RECORDED)
    response = RedirectResponse("/console/login", status_code=303, headers=HEADERS)
    response.delete_cookie(COOKIE, path="/console", secure=common.secure(request), httponly=True, samesite="strict")
    return response


# -- actions -------------------------------------------------------------------------------


def _back(fields: dict[str, str]) -> str:
    """Where an action returns: a console page named by the form (path and query), or
    the overview; never another site."""
    back = fields.get("back", "")
    back = _PAGES.get(back, back)
    parts = urlsplit(back)
    if parts.scheme or parts.netloc or not parts.path.startswith("/console") or "\\" in back:
        return "/console"
    return back


def _done(back: str, done: str) -> RedirectResponse:
    joiner = "&" if "?" in back else "?"
    return RedirectResponse(f"{back}{joiner}done={quote(done)}", status_code=303, headers=HEADERS)


async def _act(request: Request, action: Any, *args: Any) -> Response:
    checked = await common.checked(request)
    if isinstance(checked, Response):
        return checked
    _, fields = checked
    c = ctx(request)
    try:
        done = await c.call(action, *args)
    except ValueError as exc:
        return common.refused(str(exc), 400)
    return _done(_back(dict(fields)), done)


def _letters(request: Request) -> DeadLetters:
    broker = ctx(request).client.broker
    return DeadLetters(broker.client, broker)


@router.post("/queues/{queue}/pause")
async def pause(request: Request, queue: str) -> Response:
    pauses = QueuePauses(ctx(request).client.broker.client)
    return await _act(request, lambda: f"paused {queue}" if pauses.pause(queue) else f"{queue} was already paused")


@router.post("/queues/{queue}/resume")
async def resume(request: Request, queue: str) -> Response:
    pauses = QueuePauses(ctx(request).client.broker.client)
    return await _act(request, lambda: f"resumed {queue}" if pauses.resume(queue) else f"{queue} was not paused")


@router.post("/dead-letters/{letter_id}/retry")
async def retry_one(request: Request, letter_id: str) -> Response:
    letters = _letters(request)
    return await _act(request, lambda: f"retried {int(letters.retry(letter_id))}")


@router.post("/dead-letters/{letter_id}/purge")
async def purge_one(request: Request, letter_id: str) -> Response:
    letters = _letters(request)
    return await _act(request, lambda: f"purged {int(letters.purge(letter_id))}")


@router.post("/dead-letters/retry")
async def retry_shown(request: Request) -> Response:
    return await _bulk(request, "retry")


@router.post("/dead-letters/purge")
async def purge_shown(request: Request) -> Response:
    return await _bulk(request, "purge")


async def _bulk(request: Request, verb: str) -> Response:
    """Retry or purge the letters the form names (``id``: ``queue:redis id``, the ones the
    page showed), once confirmed (``confirmed=yes``, set by the page's confirmation)."""
    checked = await common.checked(request)
    if isinstance(checked, Response):
        return checked
    session, fields = checked
    named = [value for name, value in fields if name == "id"][:MAX_BULK]
    pairs = [(q, i) for q, _, i in (value.partition(":") for value in named) if q in QUEUES and i]
    form = dict(fields)
    back = _back(form)
    if not pairs:
        return _done(back, f"{_PAST[verb]} 0: the form named no letters")
    if form.get("confirmed") != "yes":  # no script asked: ask here, naming the same letters
        keys = await common.console_keys(request)
        return render(
            "confirm.html",
            page="confirm",
            verb=verb,
            pairs=pairs,
            back=back,
            csrf=keys.csrf(session),
            open=ctx(request).tokens.open,
        )
    letters = _letters(request)
    c = ctx(request)
    if verb == "retry":
        done = "retried {} (skipped {})".format(*await c.call(letters.retry_ids, pairs))
    else:
        done = f"purged {await c.call(letters.purge_ids, pairs)}"
    return _done(back, done)
