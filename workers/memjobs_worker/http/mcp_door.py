"""``/mcp``: the ``nova_knowledge`` server's agent profile (``recall`` and
``get_chunk``) over the SDK's streamable HTTP transport, on the HTTP API.

Who may call (docs/mcp.md):

- a loopback peer only (127.0.0.0/8, ::1), whatever address the API listens
  on: anyone else gets 403 ``forbidden``, token or not;
- with the host token (``Authorization: Bearer $MEMJOBS_API_HOST_TOKEN``), or
  a scoped token (``memjobs token issue``) with the ``knowledge`` scope for the
  owner named: no token or a wrong one is 401 ``unauthorized``, the gateway
  token 403 ``forbidden`` (coding agents are the host's, not the gateway's), a
  scoped token without ``knowledge`` or for another owner 403;
- for the owner ``X-Memjobs-Owner`` names (percent-encoded, as on the GET
  routes): the host token vouches for the owner it names, a scoped token only
  for its own owners; every tool answers from that owner's documents only.

Not served at all (404, as any unknown path) when knowledge is off, nor when
neither a host token nor a token key is set: the rest of the API may then run
open on loopback, but ``/mcp`` is never served without a credential to check.

Stateless with JSON answers: each POST is one self-contained exchange, so no
MCP session outlives its request, and the API's limits (the token checked by
the guard before the body, body size, a slot of the ``api`` pool given back
once the answer is produced, the backend timeout) apply to every call. GET
(the server's own stream, which the SDK holds open with pings for as long as
the client stays) and DELETE are 405 ``method_not_allowed``, as the
streamable HTTP transport allows a server without that stream to answer.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from memjobs_client.contracts import owner_key
from memjobs_client.errors import BackendUnavailable
from memjobs_worker.http.auth import PRINCIPAL, Need, Principal, is_loopback, owner_id_of_header
from memjobs_worker.http.context import ApiContext
from memjobs_worker.http.problems import ProblemError, problem_response

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings

    from memjobs_worker.mcp_server.server import Ctx

# The MCP SDK (about 23 MB once imported) is imported by an endpoint that is
# served, when it is built: an API without tokens, or with the features off, never loads it.

log = logging.getLogger(__name__)

T = TypeVar("T")

PATH = "/mcp"
OWNER_HEADER = "x-memjobs-owner"


def loopback_hosts() -> TransportSecuritySettings:
    """Host headers accepted (the SDK's DNS-rebinding check): loopback names only."""
    from mcp.server.transport_security import TransportSecuritySettings

    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


def owner_key_of_header(value: str | None) -> str | None:
    """The storage key of a percent-encoded ``X-Memjobs-Owner``; None when absent or malformed."""
    owner = owner_id_of_header(value)
    return None if owner is None else owner_key(owner)


class StatelessMcpEndpoint:
    """An MCP server on the HTTP API, stateless with JSON answers (an ASGI app): what
    ``/mcp`` and ``/mcp/memory`` share. Loopback peers only; a credential checked as
    the module docstring says, then :meth:`_admit` for what the endpoint itself needs;
    POST only. A subclass sets :attr:`path` and builds :attr:`_server` when
    :attr:`served`.

    Parameters:
        context: the API's context: its tokens and its backend calls.
        enabled: whether the feature behind the endpoint is on.
        max_body_bytes: the largest request body (``MEMJOBS_API_MAX_BODY_BYTES``).
    """

    path = PATH

    def __init__(self, context: ApiContext, *, enabled: bool, max_body_bytes: int) -> None:
        self.context = context
        self.served = enabled and (context.tokens.host is not None or context.tokens.scoped is not None)
        self.max_body_bytes = max_body_bytes
        self._manager: StreamableHTTPSessionManager | None = None
        self._server: MCPServer[Any] | None = None

    def mount(self, app: FastAPI) -> None:
        """Add the endpoint to ``app`` when it is served (never in the OpenAPI document)."""
        if self.served:
            app.router.routes.append(
                Route(self.path, endpoint=self, methods=["GET", "POST", "DELETE"], include_in_schema=False)
            )

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The SDK's request handling, for the app's lifespan (a no-op when not served)."""
        if self._server is None:
            yield
            return
        self._server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            transport_security=loopback_hosts(),
            max_request_body_size=self.max_body_bytes,
        )
        manager = self._server.session_manager  # a new one for each run of the lifespan
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            # Stateless: no stream for the server to speak first (GET) and no session to
            # end (DELETE). The SDK would hold a GET open for ever, pinging it (issue 31).
            await problem_response(
                "method_not_allowed", "this MCP endpoint is stateless: POST each request", headers={"Allow": "POST"}
            )(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is None and self._manager is None:
            refusal = problem_response("backend_unavailable", "the MCP endpoint is not running")
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        assert self._manager is not None
        await self._manager.handle_request(scope, receive, send)

    def _refusal(self, scope: Scope) -> Response | None:
        client = scope.get("client")
        if client is None or not is_loopback(str(client[0])):
            return problem_response("forbidden", "the MCP endpoint answers loopback clients only")
        headers = Headers(scope=scope)
        try:
            principal: Principal | None = scope.get("state", {}).get(PRINCIPAL)
            if principal is None:  # not through the guard (an app built without it)
                principal = self.context.tokens.authenticate(headers.get("authorization"))
            if principal.kind != "scoped":
                principal.require(Need("admin", per_owner=False))  # the host token
            owner = owner_id_of_header(headers.get(OWNER_HEADER))
            if owner is None:
                return problem_response(
                    "validation", "X-Memjobs-Owner: must be a non-empty, percent-encoded UTF-8 owner id"
                )
            self._admit(principal, owner, scope)
        except ProblemError as exc:
            return problem_response(exc.reason, exc.detail, headers=exc.headers)
        return None

    def _admit(self, principal: Principal, owner: str, scope: Scope) -> None:
        """What this endpoint needs of an authenticated ``principal`` for ``owner``.

        Raises:
            ProblemError: refused (403).
        """
        raise NotImplementedError

    async def _run(self, fn: Callable[[], T]) -> Any:
        try:
            return await self.context.call(fn)
        except ProblemError as exc:
            raise BackendUnavailable(f"the backend did not answer ({exc.reason})") from None


class McpEndpoint(StatelessMcpEndpoint):
    """The ``/mcp`` endpoint of one API instance (see the module docstring)."""

    def __init__(self, context: ApiContext, *, enabled: bool, max_body_bytes: int) -> None:
        super().__init__(context, enabled=enabled, max_body_bytes=max_body_bytes)
        if self.served:
            from memjobs_worker.mcp_server import Backend, build_server

            self._server = build_server(
                "agent",
                Backend(
                    search=context.search_knowledge,
                    read_chunk=context.read_cited_chunk,
                    owner_of=_owner_of,
                    run=self._run,
                ),
            )
        elif enabled:
            log.info("MCP endpoint not served: it needs MEMJOBS_API_HOST_TOKEN or MEMJOBS_API_TOKEN_KEY (docs/mcp.md)")

    def _admit(self, principal: Principal, owner: str, scope: Scope) -> None:
        if principal.kind == "scoped":
            principal.require(Need("knowledge"))
            principal.require_owner(owner)


def _owner_of(ctx: Ctx) -> str:
    """The owner the request's header names (the endpoint refused requests without one)."""
    from mcp.server.mcpserver.exceptions import ToolError

    key = owner_key_of_header((ctx.headers or {}).get(OWNER_HEADER))
    if key is None:
        raise ToolError("unauthorized: the request names no owner")
    return key
