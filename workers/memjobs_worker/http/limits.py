"""Limits every request meets before a route runs: in-flight bound, body cap, media type.

What: one pure ASGI middleware. A request over ``api_max_in_flight`` gets 503
``overloaded`` with ``Retry-After`` at once (nothing queues up behind a slow
backend); a body over ``api_max_body_bytes`` gets 413 ``too_large`` (checked on
``Content-Length`` and again while reading, so a chunked body cannot slip past);
a POST or PUT whose body is not declared JSON gets 415.

Why here and not in the routes: the body is read (and capped) before FastAPI
parses it, so an oversized body never reaches a parser or the heap in full.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memjobs_worker.http.problems import problem_response

#: Paths that answer even when the API is full (a liveness probe must not fail under load).
UNBOUNDED_PATHS = frozenset({"/healthz", "/metrics"})
#: The console's forms post URL-encoded bodies (a browser form sends no JSON).
FORM_PREFIX = "/console/"


class Limits:
    """ASGI middleware enforcing the in-flight bound, the body cap and JSON bodies."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, max_in_flight: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_in_flight = max_in_flight
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] in UNBOUNDED_PATHS:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            await problem_response("overloaded")(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self._bounded(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared: str | None = None
        media = ""
        for key, value in scope["headers"]:  # names arrive lower-cased (ASGI)
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
                await problem_response("too_large", f"the limit is {self.max_body_bytes} bytes")(
                    scope, receive, send)
                return
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        form = media == "application/x-www-form-urlencoded" and scope["path"].startswith(FORM_PREFIX)
        if media != "application/json" and not media.endswith("+json") and not form:
            await problem_response("unsupported_media_type")(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                await problem_response("too_large", f"the limit is {self.max_body_bytes} bytes")(
                    scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(bytes(body), receive), send)


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
