"""The app factory: :func:`create_app` wires context, limits, metrics, problems and routes.

The OpenAPI document does not depend on settings (limits configured at run
time are enforced, not advertised), so the committed ``docs/openapi.json`` is
the document every instance serves at ``/openapi.json``.
"""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from memjobs_worker.endpoints import Endpoints
from memjobs_worker.http import console, problems
from memjobs_worker.http.context import ApiContext
from memjobs_worker.http.guard import ReplyNotRead, RequestGuard, SecurityHeaders
from memjobs_worker.http.mcp_door import McpEndpoint
from memjobs_worker.http.mcp_memory_door import PATH as MEMORY_MCP_PATH
from memjobs_worker.http.mcp_memory_door import MemoryMcpEndpoint
from memjobs_worker.http.metrics import RecordRequests
from memjobs_worker.http.routes import (
    blackboard,
    dead_letters,
    knowledge,
    memory,
    memory_docs,
    ops,
    owners,
    reads,
    sessions,
)
from memjobs_worker.http.schemas import Problem, known_fields
from memjobs_worker.http.slots import API_POOL, PUBLIC_POOL, RefusalLog, Slots
from memjobs_worker.settings import Settings

log = logging.getLogger(__name__)

TITLE = "memjobs"
VERSION = "1"
DESCRIPTION = (
    "The HTTP door of memjobs for gateways in any language: the remote personal-memory "
    "protocol (remember, forget, recall, preferences), session end, knowledge and reads. "
    "Errors are RFC 9457 problem documents (application/problem+json); branch on `type`."
)

OPENAPI_PATH = "/openapi.json"
CONSOLE_PATH = "/console"
#: Routes that need no token (no owner data).
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def create_app(settings: Settings, endpoints: Endpoints) -> FastAPI:
    """A ready API instance on these settings and endpoints (closed with the app's lifespan).

    The API's composition root, with :class:`~memjobs_worker.http.context.ApiContext`:
    it takes every section because the door's runtime it builds reads them all."""
    context = ApiContext(settings, endpoints)
    body = settings.api.max_body_bytes
    mcp = McpEndpoint(context, enabled=settings.knowledge.enabled, max_body_bytes=body)  # /mcp: docs/mcp.md
    memory_mcp = MemoryMcpEndpoint(context, enabled=settings.memory.enabled, max_body_bytes=body)  # the same rules

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Everything imported and built so far lives as long as the process: move it out
        # of the collector's sight, or each full collection walks it all while every
        # request in flight waits (measured: 0.6 s stalls under load).
        gc.freeze()
        try:
            async with mcp.running(), memory_mcp.running():
                yield
        finally:
            context.close()

    app = FastAPI(
        title=TITLE,
        version=VERSION,
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_url=None,  # no schema route, and so no docs pages: docs/openapi.json is published
    )
    app.state.ctx = context
    for module in (memory, memory_docs, sessions, blackboard, knowledge, reads, ops, owners, dead_letters, console):
        app.include_router(module.router)
    mcp.mount(app)
    memory_mcp.mount(app)
    problems.install(app, known_fields())
    # Added last = outermost: metrics see every reply, the guard's refusals included;
    # the security headers go on every reply, whoever wrote it.
    slots = Slots(
        {API_POOL: settings.api.max_in_flight, PUBLIC_POOL: settings.api.max_public_in_flight},
        settings.api.max_per_client,
    )
    app.state.slots = slots
    app.state.refusals = RefusalLog(context.metrics.refused)
    app.add_middleware(
        RequestGuard,
        tokens=context.tokens,
        slots=slots,
        refusals=app.state.refusals,
        max_body_bytes=settings.api.max_body_bytes,
        body_timeout_s=settings.api.body_timeout_ms / 1000,
        mcp_served=mcp.served,
        mcp_paths=[MEMORY_MCP_PATH] if memory_mcp.served else [],
    )
    app.add_middleware(RecordRequests, metrics=context.metrics)
    app.add_middleware(SecurityHeaders)
    app.openapi = lambda: openapi_document(app)  # type: ignore[method-assign]
    rendered: list[bytes] = []

    async def openapi_json(request: Request) -> Response:
        """The document as bytes rendered once: it needs no token, so each request must cost
        next to nothing (FastAPI's own route serialises 145 KB of JSON every time)."""
        if not rendered:
            rendered.append(json.dumps(app.openapi(), separators=(",", ":")).encode())
        return Response(rendered[0], media_type="application/json")

    app.add_route(OPENAPI_PATH, openapi_json, include_in_schema=False)

    async def root(request: Request) -> Response:
        """``/`` is the console (which asks for a token when it needs one), not a 404."""
        return RedirectResponse(CONSOLE_PATH, status_code=307)

    app.add_route("/", root, include_in_schema=False)
    return app


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document: FastAPI's, plus the Problem schema and bearer security."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(title=TITLE, version=VERSION, description=DESCRIPTION, routes=app.routes)
    components = doc.setdefault("components", {})
    components.setdefault("schemas", {})["Problem"] = Problem.model_json_schema()
    components["securitySchemes"] = {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "MEMJOBS_API_GATEWAY_TOKEN for every /v1 route but reindex and "
            "/v1/ops/dead-letters, which need MEMJOBS_API_HOST_TOKEN (it also opens the "
            "gateway routes), or a scoped token (`memjobs token issue`) whose scopes "
            "and owners cover the request. A loopback "
            "server with no credential set needs none.",
        }
    }
    for path, methods in doc["paths"].items():
        if path in OPEN_PATHS:
            continue
        for operation in methods.values():
            operation["security"] = [{"bearer": []}]
    app.openapi_schema = doc
    return doc


class QuietErrors:
    """Outermost wrapper: an exception that escaped the app (after its 500 was
    sent) is logged by class name only, never with a traceback that could quote
    the request, and never reaches the server's own error log."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except ReplyNotRead:
            pass  # counted by the guard (refusals by reason); the server closes the connection
        except Exception as exc:
            log.error("request failed", extra={"error": type(exc).__name__})
