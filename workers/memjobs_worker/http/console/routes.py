"""The console's pages and form actions, server-rendered from Jinja2 templates.

``GET /console`` (the overview) and ``GET /console/dead-letters`` refresh
themselves every :data:`REFRESH_S` seconds (a meta refresh: no script at all).
Actions are POSTed forms carrying the CSRF token; each answers with a 303 back
to the page it came from, saying what it did.

Every page and action first asks Redis whether the session is still live
(:mod:`~.live`); when Redis does not answer, the console answers 503 with a
page saying so (fail closed) rather than trusting the signature alone. The
signing key is read from Redis on the first console request that needs it and
kept for the life of the process; Redis down then is the same 503.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from memjobs_client.contracts import QUEUES
from memjobs_client.errors import MemjobsError
from memjobs_worker.http.console.live import LiveSessions, signing_key
from memjobs_worker.http.console.session import COOKIE, SESSION_S, ConsoleKeys, Session, is_host_token
from memjobs_worker.http.context import ApiContext
from memjobs_worker.http.problems import ProblemError
from memjobs_worker.observability.retrying import stale_after_ms
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
#: Seconds a browser is asked to wait (Retry-After) when Redis does not answer.
RETRY_AFTER_S = 5
SESSIONS_DOWN = ("Redis is not answering, so the console cannot check its sessions and "
                 "refuses every page and action until it is back. Nothing was done.")
LOGOUT_NOT_RECORDED = ("Redis is not answering, so the logout was not recorded: this session "
                       "is still valid. Log out again once Redis is back.")

T = TypeVar("T")


class _SessionsDown(Exception):
    """Redis did not answer a session call: the console refuses (fail closed)."""


async def _keys(request: Request) -> ConsoleKeys:
    """The console's signing keys, read from Redis once per process and kept.

    Two first requests racing both read the same key (it is created with SET NX).

    Raises:
        _SessionsDown: Redis did not give the key (in time).
    """
    keys: ConsoleKeys | None = getattr(request.app.state, "console_keys", None)
    if keys is None:
        c = _ctx(request)
        try:
            key = await c.call(signing_key, c.client.broker.client, c.tokens.host)
        except (MemjobsError, ProblemError) as exc:
            raise _SessionsDown from exc
        keys = ConsoleKeys(c.tokens, key)
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


def _render(name: str, status: int = 200, **values: Any) -> HTMLResponse:
    html = _TEMPLATES.get_template(name).render(refresh_s=REFRESH_S, ago=_ago, **values)
    return HTMLResponse(html, status_code=status, headers=_HEADERS)


def _secure(request: Request) -> bool:
    """Whether the browser reached the console over HTTPS, so the cookie gets ``Secure``.

    The ASGI scope's scheme is ``https`` when uvicorn serves TLS itself, or when the
    request came through a proxy listed in ``api_forwarded_allow_ips`` saying
    ``X-Forwarded-Proto: https`` (uvicorn takes the header from those addresses only).
    ``api_tls_terminated_by_proxy`` declares a TLS proxy the only way in: every
    browser then speaks HTTPS, whatever the proxy forwards.
    """
    return request.url.scheme == "https" or _ctx(request).settings.api_tls_terminated_by_proxy


def _set_cookie(response: Response, request: Request, cookie: str) -> Response:
    response.set_cookie(COOKIE, cookie, max_age=SESSION_S, path="/console", httponly=True,
                        samesite="strict", secure=_secure(request))
    return response


def _unavailable(why: str) -> Response:
    response = _render("refused.html", status=503, page="refused", why=why)
    response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


async def _on_sessions(request: Request, act: Callable[[LiveSessions], T]) -> T:
    """``act`` on the live sessions, run off the event loop within the backend timeout.

    Raises:
        _SessionsDown: Redis did not answer (in time).
    """
    c = _ctx(request)
    try:
        return await c.call(act, LiveSessions(c.client.broker.client))
    except (MemjobsError, ProblemError) as exc:
        raise _SessionsDown from exc


async def _proven(request: Request) -> Session | None:
    """The session the request's cookie proves: well-formed, signed, unexpired and not
    logged out; None for anything else.

    Raises:
        _SessionsDown: the cookie is signed, but Redis cannot say whether it is live.
    """
    session = (await _keys(request)).session(request.cookies.get(COOKIE))
    if session is None or not await _on_sessions(request, lambda live: live.alive(session)):
        return None
    return session


async def _visitor(request: Request) -> tuple[Session | None, str | None]:
    """The visitor's session, and a cookie to set when the API is open and it has none.

    Raises:
        _SessionsDown: Redis did not answer.
    """
    keys = await _keys(request)
    found = await _proven(request)
    if found is not None or not keys.open:
        return found, None
    session, cookie = keys.new_session()
    await _on_sessions(request, lambda live: live.start(session))
    return session, cookie


async def _page(request: Request, template: str, page: str) -> Response:
    try:
        session, cookie = await _visitor(request)
        keys = await _keys(request)
    except _SessionsDown:
        return _unavailable(SESSIONS_DOWN)
    if session is None:
        return RedirectResponse("/console/login", status_code=303, headers=_HEADERS)
    c = _ctx(request)
    broker = c.client.broker
    try:
        view = await c.call(overview.read, broker.client, c.ledger(),
                            stale_after_ms=stale_after_ms(c.settings))
        problem = None
    except Exception as exc:  # noqa: BLE001 - the page says so, never with a traceback
        view, problem = None, getattr(exc, "reason", None) or "backend_unavailable"
    response = _render(template, view=view, problem=problem, page=page,
                       csrf=keys.csrf(session), queues=QUEUES,
                       done=request.query_params.get("done", "")[:80], now=time.time(),
                       open=keys.open)
    return response if cookie is None else _set_cookie(response, request, cookie)


@router.get("")
async def overview_page(request: Request) -> Response:
    return await _page(request, "overview.html", "overview")


@router.get("/dead-letters")
async def dead_page(request: Request) -> Response:
    return await _page(request, "dead_letters.html", "dead")


@router.get("/login")
async def login_page(request: Request) -> Response:
    if _ctx(request).tokens.open:
        return RedirectResponse("/console", status_code=303, headers=_HEADERS)
    return _render("login.html", page="login", refused=False)


@router.post("/login")
async def login(request: Request) -> Response:
    tokens = _ctx(request).tokens
    form = await _form(request)
    if tokens.open:
        return RedirectResponse("/console", status_code=303, headers=_HEADERS)
    if not is_host_token(tokens, form.get("token", "")):
        return _render("login.html", status=403, page="login", refused=True)
    try:
        session, cookie = (await _keys(request)).new_session()
        await _on_sessions(request, lambda live: live.start(session))
    except _SessionsDown:
        return _unavailable(SESSIONS_DOWN)
    response = RedirectResponse("/console", status_code=303, headers=_HEADERS)
    return _set_cookie(response, request, cookie)


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End the session in Redis (a copy of the cookie stops working) and drop the cookie."""
    checked = await _checked(request, down=LOGOUT_NOT_RECORDED)
    if isinstance(checked, Response):
        return checked
    session, _ = checked
    try:
        await _on_sessions(request, lambda live: live.end(session))
    except _SessionsDown:
        return _unavailable(LOGOUT_NOT_RECORDED)
    response = RedirectResponse("/console/login", status_code=303, headers=_HEADERS)
    response.delete_cookie(COOKIE, path="/console", secure=_secure(request), httponly=True,
                           samesite="strict")
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


async def _checked(request: Request, down: str = SESSIONS_DOWN,
                   ) -> tuple[Session, dict[str, str]] | Response:
    """The session and form of a POST whose session and CSRF token are valid, or the refusal:
    403 for a missing, malformed, forged, expired or logged-out cookie or token; 503 saying
    ``down`` when Redis cannot say whether the session is live."""
    form = await _form(request)
    try:
        keys = await _keys(request)
        session = await _proven(request)
    except _SessionsDown:
        return _unavailable(down)
    if session is None:
        return _render("refused.html", status=403, page="refused",
                       why="no console session (none, expired or logged out): "
                           "open the console (and log in) first")
    if not keys.csrf_ok(session, form.get("csrf")):
        return _render("refused.html", status=403, page="refused",
                       why="the form's CSRF token is missing or not this session's")
    return session, form


async def _act(request: Request, action: Any, with_queue: bool = False) -> Response:
    checked = await _checked(request)
    if isinstance(checked, Response):
        return checked
    _, form = checked
    c = _ctx(request)
    broker = c.client.broker
    letters = DeadLetters(broker.client, broker)
    if with_queue:
        queue = form.get("queue") or None
        if queue is not None and queue not in QUEUES:
            return _render("refused.html", status=400, page="refused", why="no such queue")
        done = await c.call(action, letters, queue)
    else:
        done = await c.call(action, letters)
    back = _PAGES.get(form.get("back", ""), "/console")
    return RedirectResponse(f"{back}?done={quote(done)}", status_code=303, headers=_HEADERS)
