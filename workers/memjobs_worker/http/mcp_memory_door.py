"""``/mcp/memory``: the ``nova_memory`` server (``memory``, ``recall``,
``memory__recall``) over the SDK's streamable HTTP transport, on the HTTP API.

Who may call (docs/mcp.md), as ``/mcp``:

- a loopback peer only (127.0.0.0/8, ::1): anyone else gets 403 ``forbidden``;
- with the host token, which vouches for the owner ``X-Memjobs-Owner`` names
  and may use every tool; or a scoped token (``memjobs token issue``) for that
  owner with the ``read`` scope, whose other scopes say which tools it may use
  (``write`` for the memory tool's append and replace, ``session`` for the
  sessions' ``recall``; a tool outside them is refused ``forbidden``); no token
  or a wrong one is 401, the gateway token 403 (its gateway calls ``/v1``);
- for the owner ``X-Memjobs-Owner`` names (percent-encoded): every tool
  answers from that owner's memory only.

Not served at all (404) when personal memory is off, nor when neither a host
token nor a token key is set. Stateless with JSON answers, POST only, as ``/mcp``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from fastapi import FastAPI
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from memjobs_client.errors import BackendUnavailable
from memjobs_client.gateway.tools import MemoryTools
from memjobs_worker.http.auth import PRINCIPAL, Need, Principal, is_loopback, owner_id_of_header
from memjobs_worker.http.context import ApiContext
from memjobs_worker.http.mcp_door import LOOPBACK_HOSTS, OWNER_HEADER
from memjobs_worker.http.problems import ProblemError, problem_response
from memjobs_worker.mcp_server.memory_server import (
    TOOL_SCOPES,
    MemoryBackend,
    ServiceToolBackend,
    build_memory_server,
)
from memjobs_worker.mcp_server.server import Ctx
from memjobs_worker.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

PATH = "/mcp/memory"
#: Where the endpoint leaves the scopes a call may use, in the ASGI scope's state.
SCOPES_STATE = "memjobs_memory_scopes"
ALL_SCOPES = frozenset(TOOL_SCOPES.values())


class MemoryMcpEndpoint:
    """The ``/mcp/memory`` endpoint of one API instance (an ASGI app; see the module docstring)."""

    def __init__(self, settings: Settings, context: ApiContext) -> None:
        self.context = context
        self.served = settings.memory_enabled and (context.tokens.host is not None
                                                   or context.tokens.scoped is not None)
        self.max_body_bytes = settings.api_max_body_bytes
        self._manager: StreamableHTTPSessionManager | None = None
        tools = MemoryTools(ServiceToolBackend(context.memory_docs, context.recall_memories,
                                              context.sessions),
                            source="mcp")
        self._server = build_memory_server(MemoryBackend(
            tools=tools, owner_of=_owner_of, scopes_of=_scopes_of, run=self._run)) if self.served else None

    def mount(self, app: FastAPI) -> None:
        """Add ``/mcp/memory`` to ``app`` when it is served (never in the OpenAPI document)."""
        if self.served:
            app.router.routes.append(Route(PATH, endpoint=self, methods=["GET", "POST", "DELETE"],
                                           include_in_schema=False))

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The SDK's request handling, for the app's lifespan (a no-op when not served)."""
        if self._server is None:
            yield
            return
        self._server.streamable_http_app(stateless_http=True, json_response=True,
                                         transport_security=LOOPBACK_HOSTS,
                                         max_request_body_size=self.max_body_bytes)
        manager = self._server.session_manager
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await problem_response("method_not_allowed", "this MCP endpoint is stateless: "
                                   "POST each request", headers={"Allow": "POST"})(scope, receive, send)
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
                return problem_response("validation", "X-Memjobs-Owner: must be a non-empty, "
                                        "percent-encoded UTF-8 owner id")
            scopes = ALL_SCOPES
            if principal.kind == "scoped":
                principal.require(Need("read"))
                principal.require_owner(owner)
                scopes = frozenset(principal.scopes) & ALL_SCOPES
        except ProblemError as exc:
            return problem_response(exc.reason, exc.detail, headers=exc.headers)
        scope.setdefault("state", {})[SCOPES_STATE] = scopes
        return None

    async def _run(self, fn: Callable[[], T]) -> Any:
        try:
            return await self.context.call(fn)
        except ProblemError as exc:
            raise BackendUnavailable(f"the backend did not answer ({exc.reason})") from None


def _owner_of(ctx: Ctx) -> str:
    """The owner id the request's header names (the endpoint refused requests without one)."""
    owner = owner_id_of_header((ctx.headers or {}).get(OWNER_HEADER))
    if owner is None:
        raise ToolError("forbidden: the request names no owner")
    return owner


def _scopes_of(ctx: Ctx) -> frozenset[str]:
    """The scopes the endpoint allowed this request (none if it did not pass through it)."""
    request = ctx.request_context.request
    state = getattr(request, "scope", {}).get("state", {})
    scopes = state.get(SCOPES_STATE) if isinstance(state, dict) else None
    return scopes if isinstance(scopes, frozenset) else frozenset()
