"""The guard every request meets before a route runs (docs/security.md).

What: one pure ASGI middleware, in this order:

1. ``/healthz``, ``/readyz`` and ``/metrics`` pass at once: no limit applies to
   them, so a probe answers whatever the rest of the API is doing (one
   ``/readyz`` answer serves every probe for a second: a flood of them cannot
   crowd the backend threads);
2. with the API open (loopback, no credentials), the ``Host`` header must name
   ``localhost``, ``127.0.0.1`` or ``[::1]`` (a DNS-rebinding page cannot read
   owners' data): 400 ``untrusted_host``;
3. ``X-Memjobs-Owner`` given twice: 422 ``validation``;
4. on ``/v1/``, the bearer token (401) and the route's scope (403), before any
   byte of the body is read and before the request counts anywhere;
5. at most ``api_max_per_client`` requests open per client address: 429;
6. the body: over ``api_max_body_bytes`` 413 (declared or while reading), not
   JSON 415, not all sent within ``api_body_timeout_ms`` 408 (and a reply the
   client does not take within that time is abandoned, the connection closed);
7. at most ``api_max_in_flight`` requests past all this (the ones that use the
   backend): 503 ``overloaded``.

Every refusal is a problem document, closes the connection (a client sending a
body slowly keeps nothing open), and carries ``Retry-After`` when retrying can
help (408, 429, 503). :class:`SecurityHeaders` adds ``nosniff`` and
``no-store`` to every reply.

Why here and not in the routes: the body is read (and capped) before FastAPI
parses it, so an oversized, slow or unauthenticated body never reaches a
parser, the heap in full, or a slot that an honest request needs.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memjobs_worker.http.auth import NEED, PRINCIPAL, Tokens, is_loopback, need_of
from memjobs_worker.http.problems import ProblemError, problem_response

#: Paths outside every limit (a liveness or readiness probe must not fail under load).
UNBOUNDED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
#: The readiness probe: outside the limits, so its answer is shared (:class:`SharedReply`).
READY_PATH = "/readyz"
#: Seconds one readiness answer (it pings Redis and the database) serves every probe.
READY_REUSE_S = 1.0
#: The console's forms post URL-encoded bodies (a browser form sends no JSON).
FORM_PREFIX = "/console/"
#: Headers every reply carries.
SECURITY_HEADERS = ((b"x-content-type-options", b"nosniff"), (b"cache-control", b"no-store"))


def host_name(value: str) -> str:
    """The name of a ``Host`` header without its port (``[::1]:8780`` → ``[::1]``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Limits:
    """ASGI middleware: the guard (see the module docstring).

    Parameters:
        app: the inner application.
        tokens: the credentials (open: the host check applies).
        routes: the application's routes, to learn the scope a /v1 route needs.
    """

    def __init__(self, app: ASGIApp, *, tokens: Tokens, routes: list[BaseRoute],
                 max_body_bytes: int, max_in_flight: int, max_per_client: int,
                 body_timeout_s: float) -> None:
        self.app = app
        self.tokens = tokens
        self.routes = routes
        self.max_body_bytes = max_body_bytes
        self.max_in_flight = max_in_flight
        self.max_per_client = max_per_client
        self.body_timeout_s = body_timeout_s
        self.in_flight = 0
        self.ready = SharedReply(READY_REUSE_S)
        self._flat: list[BaseRoute] | None = None
        self.open_by_client: defaultdict[str, int] = defaultdict(int)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == READY_PATH:
            await self.ready.answer(self.app, scope, receive, send)
            return
        if scope["type"] != "http" or scope["path"] in UNBOUNDED_PATHS:
            await self.app(scope, receive, send)
            return
        try:
            self._admit(scope)
        except ProblemError as exc:
            await _refuse(scope, receive, send, exc.reason, exc.detail, exc.headers)
            return
        client = str((scope.get("client") or ("?",))[0])
        if self.open_by_client[client] >= self.max_per_client:
            await _refuse(scope, receive, send, "too_many_requests",
                          f"at most {self.max_per_client} requests open per client")
            return
        self.open_by_client[client] += 1
        try:
            await self._bounded(scope, receive, send)
        finally:
            self.open_by_client[client] -= 1
            if not self.open_by_client[client]:
                del self.open_by_client[client]

    def _admit(self, scope: Scope) -> None:
        """Host, owner header, token and scope (raises the refusal)."""
        hosts: list[bytes] = []
        owners = 0
        authorization: list[bytes] = []
        for key, value in scope["headers"]:  # names arrive lower-cased (ASGI)
            if key == b"host":
                hosts.append(value)
            elif key == b"x-memjobs-owner":
                owners += 1
            elif key == b"authorization":
                authorization.append(value)
        if self.tokens.open and (len(hosts) != 1 or
                                 not is_loopback(host_name(hosts[0].decode("latin-1")))):
            raise ProblemError("untrusted_host", "this server answers to localhost, 127.0.0.1 "
                               "and [::1] only while it runs without tokens")
        if owners > 1:
            raise ProblemError("validation", "X-Memjobs-Owner header must be given once")
        if not scope["path"].startswith("/v1/"):
            return  # the console and /mcp check their own credentials
        if len(authorization) > 1:
            raise ProblemError("unauthorized", "Authorization header must be given once",
                               headers={"WWW-Authenticate": "Bearer"})
        principal = self.tokens.authenticate(
            authorization[0].decode("latin-1") if authorization else None)
        template = self._template(scope)
        state = scope.setdefault("state", {})
        state[PRINCIPAL] = principal
        need = need_of(scope["method"], template) if template is not None else None
        if need is not None:
            state[NEED] = need
            principal.require(need)

    def _template(self, scope: Scope) -> str | None:
        """The template of the route that will answer (None: none does, the app says 404/405)."""
        if self._flat is None:
            self._flat = list(_leaf_routes(self.routes))
        for route in self._flat:
            match, _ = route.matches(scope)
            if match is Match.FULL:
                return getattr(route, "path_format", None)
        return None

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared: str | None = None
        media = ""
        for key, value in scope["headers"]:
            if key == b"content-length":
                declared = value.decode("latin-1")
            elif key == b"content-type":
                media = value.decode("latin-1").split(";")[0].strip().lower()
        if declared is not None:
            try:
                too_big = int(declared) > self.max_body_bytes
            except ValueError:
                too_big = False
            if too_big:
                await _refuse(scope, receive, send, "too_large",
                              f"the limit is {self.max_body_bytes} bytes")
                return
        if scope["method"] in ("POST", "PUT", "PATCH"):
            form = (media == "application/x-www-form-urlencoded"
                    and scope["path"].startswith(FORM_PREFIX))
            if media != "application/json" and not media.endswith("+json") and not form:
                await _refuse(scope, receive, send, "unsupported_media_type")
                return
            body = await self._read_body(scope, receive, send)
            if body is None:
                return
            receive = _replay(body, receive)
        if self.in_flight >= self.max_in_flight:
            await _refuse(scope, receive, send, "overloaded")
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, self._timed_send(send))
        finally:
            self.in_flight -= 1

    def _timed_send(self, send: Send) -> Send:
        """``send`` bounded by the body timeout: a client that does not read its reply
        cannot hold a slot (the write is abandoned and the server closes the connection)."""

        async def timed(message: Message) -> None:
            try:
                async with asyncio.timeout(self.body_timeout_s):
                    await send(message)
            except TimeoutError:
                raise ReplyNotRead() from None

        return timed

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole body, or None once refused (or the client went away)."""
        body = bytearray()
        try:
            async with asyncio.timeout(self.body_timeout_s):
                while len(body) <= self.max_body_bytes:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    body += message.get("body", b"")
                    if not message.get("more_body", False) and len(body) <= self.max_body_bytes:
                        return bytes(body)
        except TimeoutError:
            # The refusals are sent outside the timeout: a slow reader must not cut them short.
            await _refuse(scope, receive, send, "request_timeout",
                          f"the body was not sent within {self.body_timeout_s:g} s")
            return None
        await _refuse(scope, receive, send, "too_large", f"the limit is {self.max_body_bytes} bytes")
        return None


class ReplyNotRead(Exception):
    """The client did not take its reply within the body timeout."""


def _leaf_routes(routes: list[BaseRoute]) -> Iterator[BaseRoute]:
    """The routes that answer, routers included by ``include_router`` walked into
    (FastAPI keeps an included router as one entry whose routes carry their full paths)."""
    for route in routes:
        inner = getattr(getattr(route, "original_router", None), "routes", None)
        if inner is None and not hasattr(route, "path_format"):
            inner = getattr(route, "routes", None)
        if inner is not None:
            yield from _leaf_routes(list(inner))
        else:
            yield route


async def _refuse(scope: Scope, receive: Receive, send: Send, reason: str,
                  detail: str | None = None, headers: dict[str, str] | None = None) -> None:
    """A refusal that also closes the connection (whatever of the body is left is not read)."""
    await problem_response(reason, detail, headers={**(headers or {}), "Connection": "close"})(
        scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the buffered body over once, then waits for disconnect."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            message: dict[str, Any] = {"type": "http.request", "body": body, "more_body": False}
            return message
        return await receive()

    return replay


class SharedReply:
    """One answer of a GET route, shared by every request within ``reuse_s`` of it and by
    those that arrive while it is computed: a flood of readiness probes (outside every
    limit, no token) costs the backends one round of pings a second, not one per probe."""

    def __init__(self, reuse_s: float) -> None:
        self.reuse_s = reuse_s
        self._lock = asyncio.Lock()
        self._reply: list[Message] | None = None
        self._at = 0.0

    def _fresh(self) -> list[Message] | None:
        if self._reply is not None and time.monotonic() - self._at < self.reuse_s:
            return self._reply
        return None

    async def answer(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "GET":
            await app(scope, receive, send)
            return
        reply = self._fresh()
        if reply is None:
            async with self._lock:
                reply = self._fresh()
                if reply is None:
                    captured: list[Message] = []

                    async def keep(message: Message) -> None:
                        captured.append(message)

                    await app(scope, receive, keep)
                    self._reply, self._at, reply = captured, time.monotonic(), captured
        for message in reply:
            await send(message)


class SecurityHeaders:
    """ASGI middleware: ``X-Content-Type-Options: nosniff`` and ``Cache-Control: no-store``
    on every reply (replies carry owners' data; none may be cached or sniffed)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.lower() not in (b"x-content-type-options", b"cache-control")]
                message = {**message, "headers": headers + list(SECURITY_HEADERS)}
            await send(message)

        await self.app(scope, receive, sending)
