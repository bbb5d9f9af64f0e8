"""The guard every request meets before a route runs (docs/security.md).

What: one plain ASGI middleware, in this order:

1. ``/healthz``, ``/readyz`` and ``/metrics`` pass at once: no limit applies to
   them, so a probe answers whatever the rest of the API is doing (one
   ``/readyz`` answer serves every probe for a second: a flood of them cannot
   crowd the backend threads);
2. a request line and headers over :data:`MAX_HEADER_BYTES`: 431 (the server
   parses a header block that arrives in one piece whole, whatever its size);
3. with the API open (loopback, no credentials), the ``Host`` header must name
   ``localhost``, ``127.0.0.1`` or ``[::1]`` (a DNS-rebinding page cannot read
   owners' data): 400 ``untrusted_host``;
4. ``X-Memjobs-Owner`` given twice: 422; ``Authorization`` given twice: 401;
5. on ``/v1/`` and ``/mcp``, the bearer token (401), before any byte of the
   body is read and before the request counts anywhere; the caller
   (:class:`~memjobs_worker.http.auth.Principal`) is left in the scope's state
   for the one check of the route's declared scope
   (:func:`~memjobs_worker.http.auth.needs`);
6. at most ``api_max_per_client`` requests open per client address: 429;
7. the body: over ``api_max_body_bytes`` 413 (declared or while reading), not
   JSON 415, not all sent within ``api_body_timeout_ms`` 408;
8. a slot of the request's pool (:mod:`~memjobs_worker.http.slots`: ``api``
   for ``/v1`` and ``/mcp``, ``public`` for the rest): 503 ``overloaded``
   when it is full. The slot and the client's count are given back when the
   application has produced its reply; writing it is bounded by the client
   reading it (flow control) and by ``api_body_timeout_ms`` per write, after
   which the connection is closed.

Every refusal is a problem document, closes the connection (a client sending a
body slowly keeps nothing open), and carries ``Retry-After`` when retrying can
help (408, 429, 503); refusals are counted by reason, never logged one line per
request. :class:`SecurityHeaders` adds ``nosniff`` and ``no-store`` to every
reply.

Why here and not in the routes: the body is read (and capped) before FastAPI
parses it, so an oversized, slow or unauthenticated body never reaches a
parser, the heap in full, or a slot that an honest request needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memjobs_worker.http.auth import PRINCIPAL, Tokens, is_loopback
from memjobs_worker.http.problems import ProblemError, problem_response
from memjobs_worker.http.shared_reply import SharedReply
from memjobs_worker.http.slots import API_POOL, PUBLIC_POOL, REFUSED, RefusalLog, Slots

#: Paths outside every limit (a liveness or readiness probe must not fail under load).
UNBOUNDED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
#: The readiness probe: outside the limits, so its answer is shared (:class:`SharedReply`).
READY_PATH = "/readyz"
#: Seconds one readiness answer (it pings Redis and the database) serves every probe.
READY_REUSE_S = 1.0
#: The console's forms post URL-encoded bodies (a browser form sends no JSON).
FORM_PREFIX = "/console/"
#: The MCP endpoint: authenticated here as /v1 is (when it is served).
MCP_PATH = "/mcp"
#: The most bytes a request line and its headers may take.
MAX_HEADER_BYTES = 64 * 1024
#: Headers every reply carries.
SECURITY_HEADERS = ((b"x-content-type-options", b"nosniff"), (b"cache-control", b"no-store"))


def host_name(value: str) -> str:
    """The name of a ``Host`` header without its port (``[::1]:8780`` → ``[::1]``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def head_bytes(scope: Scope) -> int:
    """About the bytes of a request's line and headers, as they came on the wire."""
    line = len(scope["method"]) + len(scope.get("raw_path") or scope["path"]) + len(scope.get("query_string", b"")) + 12
    return line + sum(len(k) + len(v) + 4 for k, v in scope["headers"])


@dataclass(eq=False)
class RequestGuard:
    """ASGI middleware: the guard (see the module docstring).

    Parameters:
        app: the inner application.
        tokens: the credentials (open: the host check applies).
        slots: the pools and the per-client cap.
        refusals: where refusals are counted.
        mcp_served: whether ``/mcp`` is served (then authenticated as ``/v1``).
        mcp_paths: the other MCP endpoints served (``/mcp/memory``), authenticated as ``/v1``.
    """

    app: ASGIApp
    _: KW_ONLY
    tokens: Tokens = field(repr=False)
    slots: Slots
    refusals: RefusalLog
    max_body_bytes: int
    body_timeout_s: float
    mcp_served: bool = False
    mcp_paths: Collection[str] = ()
    ready: SharedReply = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.mcp_paths = frozenset(self.mcp_paths)
        self.ready = SharedReply(READY_REUSE_S)

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
            await self._refuse(scope, receive, send, exc.reason, exc.detail, exc.headers)
            return
        client = str((scope.get("client") or ("?",))[0])
        if not self.slots.admit_client(client):
            await self._refuse(
                scope,
                receive,
                send,
                "too_many_requests",
                f"at most {self.slots.max_per_client} requests open per client",
            )
            return
        release_client = _once(lambda: self.slots.release_client(client))
        try:
            await self._bounded(scope, receive, send, release_client)
        finally:
            release_client()

    def _authenticated(self, path: str) -> bool:
        return path.startswith("/v1/") or (self.mcp_served and path == MCP_PATH) or path in self.mcp_paths

    def _admit(self, scope: Scope) -> None:
        """Header size, host, owner header, token (raises the refusal)."""
        if head_bytes(scope) > MAX_HEADER_BYTES:
            raise ProblemError("headers_too_large", f"the request line and headers are over {MAX_HEADER_BYTES} bytes")
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
        if self.tokens.open and (len(hosts) != 1 or not is_loopback(host_name(hosts[0].decode("latin-1")))):
            raise ProblemError(
                "untrusted_host",
                "this server answers to localhost, 127.0.0.1 and [::1] only while it runs without tokens",
            )
        if owners > 1:
            raise ProblemError("validation", "X-Memjobs-Owner header must be given once")
        if len(authorization) > 1:
            raise ProblemError(
                "unauthorized", "Authorization header must be given once", headers={"WWW-Authenticate": "Bearer"}
            )
        if not self._authenticated(scope["path"]):
            return  # the console checks its own session
        principal = self.tokens.authenticate(authorization[0].decode("latin-1") if authorization else None)
        scope.setdefault("state", {})[PRINCIPAL] = principal

    async def _bounded(self, scope: Scope, receive: Receive, send: Send, release_client: Any) -> None:
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
                await self._refuse(scope, receive, send, "too_large", f"the limit is {self.max_body_bytes} bytes")
                return
        if scope["method"] in ("POST", "PUT", "PATCH"):
            form = media == "application/x-www-form-urlencoded" and scope["path"].startswith(FORM_PREFIX)
            if media != "application/json" and not media.endswith("+json") and not form:
                await self._refuse(scope, receive, send, "unsupported_media_type")
                return
            body = await self._read_body(scope, receive, send)
            if body is None:
                return
            receive = _replay(body, receive)
        pool = API_POOL if self._authenticated(scope["path"]) else PUBLIC_POOL
        if not self.slots.take(pool):
            await self._refuse(scope, receive, send, "overloaded")
            return

        def give_back() -> None:
            self.slots.give_back(pool)
            release_client()

        release = _once(give_back)
        try:
            await self.app(scope, receive, self._releasing_send(send, release))
        finally:
            release()

    def _releasing_send(self, send: Send, release: Any) -> Send:
        """``send`` that gives the slot back once the reply is produced (its start), and
        bounds each write by the body timeout: a client that does not read its reply holds
        its own connection for that long, never a slot (the write is then abandoned and the
        server closes the connection)."""

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                release()
            try:
                async with asyncio.timeout(self.body_timeout_s):
                    await send(message)
            except TimeoutError:
                self.refusals.note("reply_not_read")
                raise ReplyNotRead() from None

        return sending

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
            await self._refuse(
                scope, receive, send, "request_timeout", f"the body was not sent within {self.body_timeout_s:g} s"
            )
            return None
        await self._refuse(scope, receive, send, "too_large", f"the limit is {self.max_body_bytes} bytes")
        return None

    async def _refuse(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        reason: str,
        detail: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """A refusal, counted, that also closes the connection (whatever of the body is left
        is not read); its write is bounded as a reply's is."""
        self.refusals.note(reason)
        scope.setdefault("state", {})[REFUSED] = reason  # the access log leaves it to the count
        response = problem_response(reason, detail, headers={**(headers or {}), "Connection": "close"})
        await response(scope, receive, self._releasing_send(send, lambda: None))


class ReplyNotRead(Exception):
    """The client did not take its reply within the body timeout."""


def _once(action: Callable[[], None]) -> Callable[[], None]:
    """``action`` run by the first call only: a slot given back on whichever path ends first."""
    pending = True

    def run() -> None:
        nonlocal pending
        if pending:
            pending = False
            action()

    return run


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
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.lower() not in (b"x-content-type-options", b"cache-control")
                ]
                message = {**message, "headers": headers + list(SECURITY_HEADERS)}
            await send(message)

        await self.app(scope, receive, sending)
