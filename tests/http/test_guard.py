"""The guard's bookkeeping alone (ASGI, no server): the two pools, the per-client cap,
and refusals counted by reason (issue 31, item 2)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from memjobs_worker.http.auth import Tokens
from memjobs_worker.http.guard import RequestGuard
from memjobs_worker.http.slots import RefusalLog, Slots


def scope_of(path: str, client: str = "127.0.0.1") -> dict[str, Any]:
    return {
        "type": "http",
        "method": "GET",
        "path": path,
        "headers": [(b"host", b"localhost")],
        "client": (client, 5000),
        "query_string": b"",
    }


async def receive() -> Any:
    return {"type": "http.request", "body": b"", "more_body": False}


class Held:
    """An app whose handlers stay at work until released (no reply produced)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.entered += 1
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def guarding(app: Held, slots: Slots) -> RequestGuard:
    """A guard with no tokens before ``app``, its pools ``slots``."""
    return RequestGuard(
        app, tokens=Tokens(None, None), slots=slots, refusals=RefusalLog(), max_body_bytes=1024, body_timeout_s=5
    )


async def status(guard: RequestGuard, path: str, client: str = "127.0.0.1") -> int:
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    await guard(scope_of(path, client), receive, send)
    return int(sent[0]["status"])


def test_unauthenticated_paths_have_their_own_pool() -> None:
    app = Held()
    guard = guarding(app, Slots({"api": 4, "public": 2}, 16))

    async def run() -> tuple[int, list[int]]:
        held = [asyncio.create_task(status(guard, "/openapi.json", f"127.0.0.{i + 2}")) for i in range(2)]
        while app.entered < 2:
            await asyncio.sleep(0)
        refused = await status(guard, "/console/login")  # the public pool is full
        app.release.set()  # /v1 is served meanwhile, by its own pool
        served = await asyncio.gather(status(guard, "/v1/sources"), *held)
        return refused, list(served)

    refused, served = asyncio.run(run())
    assert refused == 503 and served == [200, 200, 200]
    assert guard.slots.idle


def test_one_address_is_capped_below_the_pool() -> None:
    app = Held()
    guard = guarding(app, Slots({"api": 8, "public": 8}, 2))

    async def run() -> list[int]:
        held = [asyncio.create_task(status(guard, "/v1/sources", "127.0.0.9")) for _ in range(2)]
        while app.entered < 2:
            await asyncio.sleep(0)
        capped = await status(guard, "/v1/sources", "127.0.0.9")
        app.release.set()
        return [capped, *await asyncio.gather(status(guard, "/v1/sources", "127.0.0.10"), *held)]

    assert asyncio.run(run()) == [429, 200, 200, 200]


def test_refusals_are_one_log_line_per_reason_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]  # monotonic seconds, moved by hand
    refusals = RefusalLog(every_s=10, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="memjobs.api")
    for _ in range(500):
        refusals.note("overloaded")
    refusals.note("too_many_requests")
    now[0] += 10
    refusals.note("overloaded")
    lines = [
        (getattr(r, "reason", None), getattr(r, "count", None))
        for r in caplog.records
        if r.getMessage() == "requests refused"
    ]
    assert lines == [("overloaded", 1), ("too_many_requests", 1), ("overloaded", 500)]
