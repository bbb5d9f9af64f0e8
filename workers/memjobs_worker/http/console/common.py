"""What every console page and action shares: the templates, the headers, and
the session checks (a live, signed session; the CSRF token of a form).

Every page and action first asks Redis whether the session is still live
(:mod:`~.live`); when Redis does not answer, the console answers 503 with a
page saying so (fail closed) rather than trusting the signature alone. The
signing key is read from Redis on the first console request that needs it and
kept for the life of the process; Redis down then is the same 503.

Each page carries one inline script (:file:`templates/_script.html`: live
refresh, confirmations), allowed by the Content-Security-Policy through a
nonce drawn for that reply; nothing else may run, and no script can read the
HttpOnly session cookie.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from memjobs_client.errors import MemjobsError
from memjobs_worker.http.console.live import LiveSessions, signing_key
from memjobs_worker.http.console.session import COOKIE, SESSION_S, ConsoleKeys, Session
from memjobs_worker.http.context import ApiContext
from memjobs_worker.http.problems import ProblemError

#: Seconds between the live refreshes of the overview and the job lists.
REFRESH_S = 5
#: Seconds a browser is asked to wait (Retry-After) when Redis does not answer.
RETRY_AFTER_S = 5
#: Form fields read at most (a bulk action names every letter shown, a page at most).
MAX_FORM_FIELDS = 250
SESSIONS_DOWN = (
    "Redis is not answering, so the console cannot check its sessions and "
    "refuses every page and action until it is back. Nothing was done."
)

TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=select_autoescape(default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-{nonce}'; "
    "connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

T = TypeVar("T")


class SessionsDown(Exception):
    """Redis did not answer a session call: the console refuses (fail closed)."""


def ctx(request: Request) -> ApiContext:
    context: ApiContext = request.app.state.ctx
    return context


def ago(seconds: float | None) -> str:
    """A duration for people: ``4.2 s``, ``12 min``, ``3.1 h``, ``2.0 d``; ``-`` for none."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86_400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"


def render(name: str, status: int = 200, **values: Any) -> HTMLResponse:
    """A template as a page, with the console's headers and this reply's script nonce."""
    nonce = secrets.token_urlsafe(16)
    values.setdefault("refresh_s", REFRESH_S)
    html = TEMPLATES.get_template(name).render(ago=ago, nonce=nonce, **values)
    return HTMLResponse(
        html, status_code=status, headers={**HEADERS, "Content-Security-Policy": _CSP.format(nonce=nonce)}
    )


def refresh_of(request: Request) -> int:
    """Seconds between live refreshes: ``?refresh=`` (1 to 300) or :data:`REFRESH_S`."""
    asked = request.query_params.get("refresh", "")
    return min(300, max(1, int(asked))) if asked.isdigit() else REFRESH_S


def refused(why: str, status: int) -> HTMLResponse:
    return render("refused.html", status=status, page="refused", why=why)


def unavailable(why: str) -> Response:
    response = render("refused.html", status=503, page="refused", why=why)
    response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


async def console_keys(request: Request) -> ConsoleKeys:
    """The console's signing keys, read from Redis once per process and kept.

    Two first requests racing both read the same key (it is created with SET NX).

    Raises:
        SessionsDown: Redis did not give the key (in time).
    """
    keys: ConsoleKeys | None = getattr(request.app.state, "console_keys", None)
    if keys is None:
        c = ctx(request)
        try:
            key = await c.call(signing_key, c.client.broker.client, c.tokens.host)
        except (MemjobsError, ProblemError) as exc:
            raise SessionsDown from exc
        keys = ConsoleKeys(c.tokens, key)
        request.app.state.console_keys = keys
    return keys


def secure(request: Request) -> bool:
    """Whether the browser reached the console over HTTPS, so the cookie gets ``Secure``.

    The ASGI scope's scheme is ``https`` when uvicorn serves TLS itself, or when the
    request came through a proxy listed in ``api_forwarded_allow_ips`` saying
    ``X-Forwarded-Proto: https`` (uvicorn takes the header from those addresses only).
    ``api_tls_terminated_by_proxy`` declares a TLS proxy the only way in: every
    browser then speaks HTTPS, whatever the proxy forwards.
    """
    return request.url.scheme == "https" or ctx(request).api.tls_terminated_by_proxy


def set_cookie(response: Response, request: Request, cookie: str) -> Response:
    response.set_cookie(
        COOKIE, cookie, max_age=SESSION_S, path="/console", httponly=True, samesite="strict", secure=secure(request)
    )
    return response


async def on_sessions(request: Request, act: Callable[[LiveSessions], T]) -> T:
    """``act`` on the live sessions, run off the event loop within the backend timeout.

    Raises:
        SessionsDown: Redis did not answer (in time).
    """
    c = ctx(request)
    try:
        return await c.call(act, LiveSessions(c.client.broker.client))
    except (MemjobsError, ProblemError) as exc:
        raise SessionsDown from exc


async def proven(request: Request) -> Session | None:
    """The session the request's cookie proves: well-formed, signed, unexpired and not
    logged out; None for anything else.

    Raises:
        SessionsDown: the cookie is signed, but Redis cannot say whether it is live.
    """
    session = (await console_keys(request)).session(request.cookies.get(COOKIE))
    if session is None or not await on_sessions(request, lambda live: live.alive(session)):
        return None
    return session


async def visitor(request: Request) -> tuple[Session | None, str | None]:
    """The visitor's session, and a cookie to set when the API is open and it has none.

    Raises:
        SessionsDown: Redis did not answer.
    """
    keys = await console_keys(request)
    found = await proven(request)
    if found is not None or not keys.open:
        return found, None
    session, cookie = keys.new_session()
    await on_sessions(request, lambda live: live.start(session))
    return session, cookie


async def page_session(request: Request) -> tuple[Session, str | None, str] | Response:
    """The visitor's session, a cookie to set (open API, first visit) and its CSRF
    token; or the login redirect, or the 503 page when Redis does not answer."""
    try:
        session, cookie = await visitor(request)
        keys = await console_keys(request)
    except SessionsDown:
        return unavailable(SESSIONS_DOWN)
    if session is None:
        return RedirectResponse("/console/login", status_code=303, headers=HEADERS)
    return session, cookie, keys.csrf(session)


def finish(response: Response, request: Request, cookie: str | None) -> Response:
    return response if cookie is None else set_cookie(response, request, cookie)


async def form_fields(request: Request) -> list[tuple[str, str]]:
    """A form's fields in order (a name may repeat: ``id`` of a bulk action)."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return parse_qsl(body, max_num_fields=MAX_FORM_FIELDS)


async def checked(
    request: Request,
    down: str = SESSIONS_DOWN,
) -> tuple[Session, list[tuple[str, str]]] | Response:
    """The session and form of a POST whose session and CSRF token are valid, or the refusal:
    403 for a missing, malformed, forged, expired or logged-out cookie or token; 503 saying
    ``down`` when Redis cannot say whether the session is live; 400 for a form of more
    than :data:`MAX_FORM_FIELDS` fields."""
    try:
        fields = await form_fields(request)
    except ValueError:
        return refused(f"a console form has at most {MAX_FORM_FIELDS} fields", 400)
    try:
        keys = await console_keys(request)
        session = await proven(request)
    except SessionsDown:
        return unavailable(down)
    if session is None:
        return refused("no console session (none, expired or logged out): open the console (and log in) first", 403)
    if not keys.csrf_ok(session, dict(fields).get("csrf")):
        return refused("the form's CSRF token is missing or not this session's", 403)
    return session, fields
