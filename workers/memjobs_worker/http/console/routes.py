"""The console's pages and form actions, server-rendered from Jinja2 templates.

``GET /console`` (the overview) and ``GET /console/dead-letters`` refresh
themselves every :data:`REFRESH_S` seconds (a meta refresh: no script at all).
Actions are POSTed forms carrying the CSRF token; each answers with a 303 back
to the page it came from, saying what it did.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from memjobs_client.contracts import QUEUES
from memjobs_worker.broker import retrying
from memjobs_worker.http.console.session import COOKIE, SESSION_S, ConsoleKeys, Session
from memjobs_worker.http.context import ApiContext
from memjobs_worker.ops import overview
from memjobs_worker.ops.deadletters import DeadLetters

router = APIRouter(prefix="/console", include_in_schema=False)

#: Seconds between automatic refreshes of the overview and the dead letters.
REFRESH_S = 5
_TEMPLATES = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                         autoescape=select_autoescape(default=True), trim_blocks=True,
                         lstrip_blocks=True)
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
}
_PAGES = {"overview": "/console", "dead": "/console/dead-letters"}


def _keys(request: Request) -> ConsoleKeys:
    keys: ConsoleKeys | None = getattr(request.app.state, "console_keys", None)
    if keys is None:
        keys = ConsoleKeys(_ctx(request).tokens)
        request.app.state.console_keys = keys
    return keys


def _ctx(request: Request) -> ApiContext:
    context: ApiContext = request.app.state.ctx
    return context


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86_400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"


def _render(name: str, status: int = 200, cookie: str | None = None, secure: bool = False,
            **values: Any) -> HTMLResponse:
    html = _TEMPLATES.get_template(name).render(refresh_s=REFRESH_S, ago=_ago, **values)
    response = HTMLResponse(html, status_code=status, headers=_HEADERS)
    if cookie is not None:
        response.set_cookie(COOKIE, cookie, max_age=SESSION_S, path="/console", httponly=True,
                            samesite="strict", secure=secure)
    return response


def _session(request: Request) -> tuple[Session | None, str | None]:
    """The visitor's session, and a cookie to set when the API is open and it has none."""
    keys = _keys(request)
    found = keys.session(request.cookies.get(COOKIE))
    if found is not None or not keys.open:
        return found, None
    session, cookie = keys.new_session()
    return session, cookie


async def _page(request: Request, template: str, page: str) -> Response:
    session, cookie = _session(request)
    if session is None:
        return RedirectResponse("/console/login", status_code=303, headers=_HEADERS)
    c = _ctx(request)
    broker = c.client.broker
    try:
        view = await c.call(overview.read, broker.client, c.ledger(), lambda: retrying(broker.client))
        problem = None
    except Exception as exc:  # noqa: BLE001 - the page says so, never with a traceback
        view, problem = None, getattr(exc, "reason", None) or "backend_unavailable"
    return _render(template, cookie=cookie, secure=request.url.scheme == "https", view=view,
                   problem=problem, page=page, csrf=_keys(request).csrf(session), queues=QUEUES,
                   done=request.query_params.get("done", "")[:80], now=time.time(),
                   open=_keys(request).open)


@router.get("")
async def overview_page(request: Request) -> Response:
    return await _page(request, "overview.html", "overview")


@router.get("/dead-letters")
async def dead_page(request: Request) -> Response:
    return await _page(request, "dead_letters.html", "dead")


@router.get("/login")
async def login_page(request: Request) -> Response:
    if _keys(request).open:
        return RedirectResponse("/console", status_code=303, headers=_HEADERS)
    return _render("login.html", page="login", refused=False)


@router.post("/login")
async def login(request: Request) -> Response:
    keys = _keys(request)
    form = await _form(request)
    if keys.open:
        return RedirectResponse("/console", status_code=303, headers=_HEADERS)
    if not keys.is_host_token(form.get("token", "")):
        return _render("login.html", status=403, page="login", refused=True)
    _, cookie = keys.new_session()
    response = RedirectResponse("/console", status_code=303, headers=_HEADERS)
    response.set_cookie(COOKIE, cookie, max_age=SESSION_S, path="/console", httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    checked = await _checked(request)
    if isinstance(checked, Response):
        return checked
    response = RedirectResponse("/console/login", status_code=303, headers=_HEADERS)
    response.delete_cookie(COOKIE, path="/console")
    return response


@router.post("/dead-letters/{letter_id}/retry")
async def retry_one(request: Request, letter_id: str) -> Response:
    return await _act(request, lambda d: f"retried {int(d.retry(letter_id))}")


@router.post("/dead-letters/{letter_id}/purge")
async def purge_one(request: Request, letter_id: str) -> Response:
    return await _act(request, lambda d: f"purged {int(d.purge(letter_id))}")


@router.post("/dead-letters/retry")
async def retry_all(request: Request) -> Response:
    return await _act(request, lambda d, q=None: "retried {} (skipped {})".format(*d.retry_all(q)),
                      with_queue=True)


@router.post("/dead-letters/purge")
async def purge_all(request: Request) -> Response:
    return await _act(request, lambda d, q=None: f"purged {d.purge_all(q)}", with_queue=True)


async def _form(request: Request) -> dict[str, str]:
    body = (await request.body()).decode("utf-8", errors="replace")
    return {k: v[0] for k, v in parse_qs(body, max_num_fields=20).items()}


async def _checked(request: Request) -> dict[str, str] | Response:
    """The form of a POST whose session and CSRF token are valid, or the refusal."""
    keys = _keys(request)
    session = keys.session(request.cookies.get(COOKIE))
    form = await _form(request)
    if session is None:
        return _render("refused.html", status=403, page="refused",
                       why="no console session: open the console (and log in) first")
    if not keys.csrf_ok(session, form.get("csrf")):
        return _render("refused.html", status=403, page="refused",
                       why="the form's CSRF token is missing or not this session's")
    return form


async def _act(request: Request, action: Any, with_queue: bool = False) -> Response:
    checked = await _checked(request)
    if isinstance(checked, Response):
        return checked
    c = _ctx(request)
    broker = c.client.broker
    letters = DeadLetters(broker.client, broker)
    if with_queue:
        queue = checked.get("queue") or None
        if queue is not None and queue not in QUEUES:
            return _render("refused.html", status=400, page="refused", why="no such queue")
        done = await c.call(action, letters, queue)
    else:
        done = await c.call(action, letters)
    back = _PAGES.get(checked.get("back", ""), "/console")
    return RedirectResponse(f"{back}?done={quote(done)}", status_code=303, headers=_HEADERS)
