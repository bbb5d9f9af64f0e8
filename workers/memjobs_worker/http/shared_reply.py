"""One answer of a GET route shared by the requests that arrive close together
(the readiness probe's: :data:`~memjobs_worker.http.guard.READY_PATH`)."""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send


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
