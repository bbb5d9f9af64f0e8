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
from typing import TYPE_CHECKING

from starlette.types import Scope

from memjobs_worker.http.auth import Need, Principal, owner_id_of_header
from memjobs_worker.http.context import ApiContext
from memjobs_worker.http.mcp_door import OWNER_HEADER, StatelessMcpEndpoint

if TYPE_CHECKING:
    from memjobs_worker.mcp_server.server import Ctx

# The MCP SDK is imported when the endpoint is served (as /mcp's, mcp_door).

log = logging.getLogger(__name__)


PATH = "/mcp/memory"
#: Where the endpoint leaves the scopes a call may use, in the ASGI scope's state.
SCOPES_STATE = "memjobs_memory_scopes"


class MemoryMcpEndpoint(StatelessMcpEndpoint):
    """The ``/mcp/memory`` endpoint of one API instance (see the module docstring)."""

    path = PATH

    def __init__(self, context: ApiContext, *, enabled: bool, max_body_bytes: int) -> None:
        super().__init__(context, enabled=enabled, max_body_bytes=max_body_bytes)
        self._all_scopes: frozenset[str] = frozenset()
        if self.served:
            from memjobs_client.gateway.tools import MemoryTools
            from memjobs_worker.mcp_server.memory_server import (
                TOOL_SCOPES,
                MemoryBackend,
                ServiceToolBackend,
                build_memory_server,
            )

            self._all_scopes = frozenset(TOOL_SCOPES.values())
            tools = MemoryTools(ServiceToolBackend(context.parts, context.recall_memories), source="mcp")
            self._server = build_memory_server(
                MemoryBackend(tools=tools, owner_of=_owner_of, scopes_of=_scopes_of, run=self._run)
            )

    def _admit(self, principal: Principal, owner: str, scope: Scope) -> None:
        scopes = self._all_scopes
        if principal.kind == "scoped":
            principal.require(Need("read"))
            principal.require_owner(owner)
            scopes = frozenset(principal.scopes) & self._all_scopes
        scope.setdefault("state", {})[SCOPES_STATE] = scopes


def _owner_of(ctx: Ctx) -> str:
    """The owner id the request's header names (the endpoint refused requests without one)."""
    from mcp.server.mcpserver.exceptions import ToolError

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
