"""Hostile clients at the transport: slow bodies, idle and header-trickling
connections, forged Host headers, unauthenticated garbage, duplicate headers.
Each finding of issue 21 (items 2, 4 and 6) is a test here, over real HTTP:
the load test against a real ``memjobs api`` process, the rest against the API
served in process by the same uvicorn configuration."""

from __future__ import annotations

import json
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.support.api_process import ApiProcess
from tests.support.http import (
    GATEWAY_TOKEN,
    HOST_TOKEN,
    Api,
    connect,
    problem,
    reply_of,
    still_open,
)
from tests.support.polling import wait_for

SLOW_BODIES = 80
IDLE_CONNECTIONS = 280
RECALL = {"owner_id": "alice", "query": "green tea"}


def slow_body_head(path: str = "/v1/remember", token: str | None = GATEWAY_TOKEN, length: int = 1000) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n{{"
    ).encode()


@pytest.fixture
def api_process(api_process_factory: Callable[..., ApiProcess]) -> ApiProcess:
    """``memjobs api`` as operators run it, with both tokens, its header and body timeouts
    long enough that the test's connections stay open while it measures (the header
    deadline itself: tests/http/test_header_deadline.py)."""
    return api_process_factory(
        api_gateway_token=GATEWAY_TOKEN,
        api_host_token=HOST_TOKEN,
        api_header_timeout_ms=120_000,
        api_body_timeout_ms=120_000,
    )


def request(port: int, method: str, path: str, body: dict[str, str] | None = None) -> int:
    """One request on a new connection (a raw socket: the client costs next to nothing);
    its status."""
    payload = json.dumps(body).encode() if body is not None else b""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        f"Authorization: Bearer {GATEWAY_TOKEN}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    with connect(port) as sock:
        sock.sendall(head.encode() + payload)
        status, _, reply, _ = reply_of(sock)
    assert status == 200, reply
    return status


def timed(fn: Callable[[], int], times: int) -> list[float]:
    """Milliseconds of ``times`` requests, each on a new connection; each must be 200."""
    out = []
    for _ in range(times):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def figures(ms: list[float]) -> str:
    ordered = sorted(ms)
    return (
        f"median {statistics.median(ordered):.1f} ms, p90 {ordered[int(len(ordered) * 0.9)]:.1f} ms, "
        f"max {ordered[-1]:.1f} ms"
    )


def test_slow_bodies_and_idle_connections_leave_recall_and_probes_answering(api_process: ApiProcess) -> None:
    port, url = api_process.port, api_process.url

    def recall() -> int:
        return request(port, "POST", "/v1/recall", RECALL)

    def readyz() -> int:
        return request(port, "GET", "/readyz")

    def healthz() -> int:
        return request(port, "GET", "/healthz")

    probes = (("recall", recall), ("readyz", readyz), ("healthz", healthz))
    for _, fn in probes:  # warm: mem0 built, connections to the backends made
        timed(fn, 10)
    quiet = {name: timed(fn, 30) for name, fn in probes}
    held: list[socket.socket] = []
    try:
        # Authenticated slow bodies, each from its own loopback address (the per-client cap
        # is not what lets the others through): they wait in the body read, holding no
        # in-flight slot.
        for i in range(SLOW_BODIES):
            sock = connect(port, f"127.0.1.{i + 1}")
            sock.sendall(slow_body_head())
            held.append(sock)
        # Unauthenticated slow bodies (the issue's attack) are refused before their body
        # is read, and their connections closed: nothing of theirs is held.
        for _ in range(SLOW_BODIES):
            sock = connect(port)
            sock.sendall(slow_body_head(token=None))
            status, headers, body, closed = reply_of(sock)
            assert (status, closed) == (401, True)
            assert headers["content-type"].startswith("application/problem+json")
            assert json.loads(body)["reason"] == "unauthorized"
            sock.close()
        # Idle connections: half never send a byte, half trickle a request's headers.
        for i in range(IDLE_CONNECTIONS):
            sock = connect(port)
            if i % 2:
                sock.sendall(b"GET /v1/sources HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            held.append(sock)

        loaded = {name: timed(fn, 30) for name, fn in probes}
        assert all(still_open(s) for s in held), "the server dropped a held connection"
        metrics = httpx.get(f"{url}/metrics", timeout=30).text
        assert 'status="503"' not in metrics and 'status="429"' not in metrics
    finally:
        for sock in held:
            sock.close()
    report = {name: {"quiet": figures(quiet[name]), "loaded": figures(loaded[name])} for name in quiet}
    print(f"\n{SLOW_BODIES} slow bodies + {IDLE_CONNECTIONS} idle connections held: {json.dumps(report, indent=1)}")
    # Generous bounds on a shared 2-core machine: the point is that they answer, not how fast.
    assert max(loaded["healthz"]) < 2000 and max(loaded["readyz"]) < 5000


# -- timeouts, the per-client cap, the in-process server -----------------------------------


def test_a_body_not_sent_in_time_gets_408_with_retry_after(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN, api_body_timeout_ms=500)
    sock = connect(int(api.url.rsplit(":", 1)[1]))
    try:
        sock.sendall(slow_body_head())
        status, headers, body, closed = reply_of(sock)
    finally:
        sock.close()
    assert (status, closed) == (408, True)
    assert headers["retry-after"] == "1"
    assert json.loads(body)["reason"] == "request_timeout"
    assert api.harness.queues()["memjobs_remember"]["ready"] == 0


def test_one_client_address_is_capped_and_others_still_served(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN, api_max_per_client=2)
    port = int(api.url.rsplit(":", 1)[1])
    held = [connect(port, "127.0.0.7"), connect(port, "127.0.0.7")]
    try:
        for sock in held:
            sock.sendall(slow_body_head())
        third = connect(port, "127.0.0.7")
        deadline = time.monotonic() + 10
        while True:  # the two held requests reach the guard asynchronously
            third.sendall(
                b"GET /v1/sources HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Memjobs-Owner: a\r\n"
                + f"Authorization: Bearer {GATEWAY_TOKEN}\r\n\r\n".encode()
            )
            status, headers, body, _ = reply_of(third)
            third.close()
            if status == 429 or time.monotonic() > deadline:
                break
            third = connect(port, "127.0.0.7")
        assert status == 429 and headers["retry-after"] == "1"
        assert json.loads(body)["reason"] == "too_many_requests"
        other = httpx.get(
            f"http://127.0.0.1:{port}/v1/sources",
            timeout=10,
            headers={"Authorization": f"Bearer {GATEWAY_TOKEN}", "X-Memjobs-Owner": "a"},
        )
        assert other.status_code == 200  # from 127.0.0.1: another address
    finally:
        for sock in held:
            sock.close()


def sources_request(forwarded_for: str | None = None) -> bytes:
    extra = f"X-Forwarded-For: {forwarded_for}\r\n" if forwarded_for else ""
    return (
        f"GET /v1/sources HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Memjobs-Owner: a\r\n{extra}"
        f"Authorization: Bearer {GATEWAY_TOKEN}\r\nConnection: close\r\n\r\n"
    ).encode()


def until_refused(port: int, forwarded_for: str | None) -> int:
    """Send a request like the held one's client until the guard has counted that one (429)."""
    deadline = time.monotonic() + 10
    while True:
        with connect(port) as sock:
            sock.sendall(sources_request(forwarded_for))
            status = reply_of(sock)[0]
        if status == 429 or time.monotonic() > deadline:
            return status


@pytest.mark.parametrize("trusted", [False, True])
def test_the_client_address_comes_from_x_forwarded_for_only_behind_a_listed_proxy(
    api_factory: Callable[..., Api], trusted: bool
) -> None:
    api = api_factory(
        worker=False,
        api_gateway_token=GATEWAY_TOKEN,
        api_host_token=HOST_TOKEN,
        api_max_per_client=1,
        api_forwarded_allow_ips="127.0.0.1" if trusted else "",
    )
    port = int(api.url.rsplit(":", 1)[1])
    held = connect(port)
    try:
        held.sendall(
            slow_body_head().replace(b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\nX-Forwarded-For: 10.0.0.1\r\n")
        )
        assert until_refused(port, "10.0.0.1") == 429
        with connect(port) as sock:  # another client behind the proxy, or a forged header
            sock.sendall(sources_request("10.0.0.2"))
            status = reply_of(sock)[0]
        assert status == (200 if trusted else 429)
    finally:
        held.close()


# -- the open door on loopback: host check; headers on every reply ------------------------


def test_an_open_api_refuses_a_rebound_host_name(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    port = api.url.rsplit(":", 1)[1]
    for host in (
        "rebind.evil.example",
        f"rebind.evil.example:{port}",
        "127.0.0.1.evil.example",
        "localhost.evil.example:80",
        "[::2]",
        "10.0.0.1",
        "",
    ):
        body = problem(
            api.http.get("/v1/sources", headers={"Host": host, "X-Memjobs-Owner": "a"}), "untrusted_host", 400
        )
        assert "localhost" in body["detail"]
    for host in (
        "localhost",
        f"localhost:{port}",
        f"127.0.0.1:{port}",
        "[::1]",
        f"[::1]:{port}",
        f"127.0.0.2:{port}",
        "LOCALHOST",
    ):
        r = api.http.get("/v1/sources", headers={"Host": host, "X-Memjobs-Owner": "a"})
        assert r.status_code == 200, (host, r.text)
    # The probes answer whatever the Host (a kubelet names the pod's address).
    assert api.http.get("/healthz", headers={"Host": "10.1.2.3:8080"}).status_code == 200


def test_an_api_with_tokens_answers_any_host_name(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    r = api.http.get(
        "/v1/sources",
        headers={"Host": "memjobs.internal", "Authorization": f"Bearer {GATEWAY_TOKEN}", "X-Memjobs-Owner": "a"},
    )
    assert r.status_code == 200


def test_an_unauthenticated_bad_body_is_401_before_it_is_parsed(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    r = api.http.post("/v1/remember", content=b"{bad", headers={"content-type": "application/json"})
    problem(r, "unauthorized", 401)
    assert r.headers["connection"] == "close"
    r = api.http.post(
        "/v1/remember",
        content=b"{bad",
        headers={"content-type": "application/json", "Authorization": f"Bearer {GATEWAY_TOKEN}"},
    )
    problem(r, "malformed_json", 400)


def test_two_owner_or_authorization_headers_are_refused(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    auth = ("Authorization", f"Bearer {GATEWAY_TOKEN}")
    r = api.http.get("/v1/sources", headers=[auth, ("X-Memjobs-Owner", "alice"), ("X-Memjobs-Owner", "bob")])
    body = problem(r, "validation", 422)
    assert "X-Memjobs-Owner" in body["detail"]
    r = api.http.get(
        "/v1/sources", headers=[auth, ("Authorization", f"Bearer {HOST_TOKEN}"), ("X-Memjobs-Owner", "alice")]
    )
    assert "Authorization" in problem(r, "unauthorized", 401)["detail"]


def test_mcp_refuses_two_authorization_headers(api_factory: Callable[..., Api]) -> None:
    """Issue 31, finding 7: /mcp read the first of two Authorization headers (/v1 refused them)."""
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    common = [
        ("X-Memjobs-Owner", "alice"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
    ]
    one = api.http.post("/mcp", json=body, headers=[("Authorization", f"Bearer {HOST_TOKEN}"), *common])
    assert one.status_code == 200, one.text
    for second in (HOST_TOKEN, GATEWAY_TOKEN):
        r = api.http.post(
            "/mcp",
            json=body,
            headers=[("Authorization", f"Bearer {HOST_TOKEN}"), ("Authorization", f"Bearer {second}"), *common],
        )
        assert "Authorization" in problem(r, "unauthorized", 401)["detail"]


def test_every_reply_is_nosniff_and_no_store(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    replies = [
        api.get("/healthz"),
        api.get("/readyz"),
        api.get("/metrics"),
        api.get("/openapi.json"),
        api.get("/v1/sources", owner="a", token=GATEWAY_TOKEN),
        api.get("/v1/sources"),
        api.get("/no/such/path"),
        api.get("/console/login"),
        api.post("/v1/remember", {"owner_id": "a", "text": "tea"}, token=GATEWAY_TOKEN),
    ]
    for r in replies:
        assert r.headers["x-content-type-options"] == "nosniff", r.url
        assert r.headers["cache-control"] == "no-store", r.url


def test_bytes_that_are_not_http_are_refused_and_counted_not_logged_each(
    api_factory: Callable[..., Api], caplog: pytest.LogCaptureFixture
) -> None:
    """The server's own refusal (uvicorn's 400; no reply written by hand), closed; counted
    by reason, one log line per reason per interval, however many there are."""
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    caplog.set_level("WARNING")
    before = _refused(api, "malformed_request")
    for _ in range(5):
        with connect(int(api.url.rsplit(":", 1)[1])) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header Name: x\r\n\r\n")
            status, headers, body, closed = reply_of(sock)
        assert (status, closed) == (400, True)
    lines = [
        r
        for r in caplog.records
        if "Invalid HTTP request" in r.getMessage() or getattr(r, "reason", None) == "malformed_request"
    ]
    assert len(lines) == 1 and getattr(lines[0], "reason", None) == "malformed_request"
    # Counted as the connection ends, which may be just after the client saw it close.
    wait_for(lambda: _refused(api, "malformed_request") == before + 5, 10, "the five refusals counted", poll_s=0.05)


def _refused(api: Api, reason: str) -> float:
    """``memjobs_api_refused_total{reason}`` as the API's /metrics says now (0 before the first)."""
    line = f'memjobs_api_refused_total{{reason="{reason}"}} '
    found = [row for row in api.get("/metrics").text.splitlines() if row.startswith(line)]
    return float(found[0][len(line) :]) if found else 0.0


def guard_of(app: Any, body_timeout_s: float = 1, max_in_flight: int = 1) -> Any:
    """The guard alone (ASGI), open on loopback, around ``app``."""
    from memjobs_worker.http.auth import Tokens
    from memjobs_worker.http.guard import RequestGuard
    from memjobs_worker.http.slots import RefusalLog, Slots

    slots = Slots({"api": max_in_flight, "public": max_in_flight}, max_per_client=max_in_flight)
    return RequestGuard(
        app,
        tokens=Tokens(None, None),
        slots=slots,
        refusals=RefusalLog(),
        max_body_bytes=1024,
        body_timeout_s=body_timeout_s,
    )


def test_a_reply_the_client_does_not_take_frees_its_slot_at_once() -> None:
    """The guard alone (ASGI): a client whose socket never drains blocks the server's
    send; the slot is free as soon as the reply is produced (another request is
    served meanwhile), and past the body timeout the send is abandoned (uvicorn then
    closes the connection)."""
    import asyncio

    from memjobs_worker.http.guard import ReplyNotRead

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x" * 1_000_000})

    async def never_drains(message: Any) -> None:
        if message["type"] == "http.response.body":
            await asyncio.Event().wait()

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    guard = guard_of(app, body_timeout_s=5)
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/sources",
        "headers": [(b"host", b"localhost")],
        "client": ("127.0.0.1", 5000),
        "query_string": b"",
    }

    async def run() -> list[Any]:
        stuck = asyncio.create_task(guard(dict(scope), receive, never_drains))
        while not stuck.done() and not guard.slots.idle:
            await asyncio.sleep(0)  # until the stuck reply has been produced
        assert guard.slots.idle and not stuck.done()  # its slot is back; its write waits
        served: list[Any] = []

        async def kept(message: Any) -> None:
            served.append(message)

        await guard(dict(scope), receive, kept)  # the one slot serves another request
        return [served, await asyncio.gather(stuck, return_exceptions=True)]

    started = time.monotonic()
    served, (stuck,) = asyncio.run(run())
    assert served[0]["status"] == 200 and isinstance(stuck, ReplyNotRead)
    assert time.monotonic() - started < 30
    assert guard.slots.idle


@pytest.mark.parametrize("kib", [70, 93])
@pytest.mark.parametrize("path", ["/v1/sources", "/mcp", "/openapi.json"])
def test_a_big_header_block_read_in_one_piece_gets_431(api_factory: Callable[..., Api], kib: int, path: str) -> None:
    """Issue 31, finding 7: a 70-93 KB header block sent in one write was parsed whole and
    accepted (the 64 KiB check counted only what came in pieces)."""
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    pad = "".join(f"X-Pad-{i}: {'a' * 1000}\r\n" for i in range(kib))
    head = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {HOST_TOKEN}\r\n"
        f"X-Memjobs-Owner: a\r\n{pad}\r\n"
    ).encode()
    assert len(head) > 64 * 1024
    with connect(int(api.url.rsplit(":", 1)[1])) as sock:
        sock.sendall(head)
        status, headers, body, closed = reply_of(sock)
    assert (status, closed) == (431, True)
    assert json.loads(body)["reason"] == "headers_too_large"


def test_endless_headers_are_refused_and_not_kept(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    with connect(int(api.url.rsplit(":", 1)[1])) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        try:
            for i in range(200):  # 200 KiB of header lines, never ending
                sock.sendall(f"X-Pad-{i}: {'a' * 1000}\r\n".encode())
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed as soon as it refused
        status, headers, body, closed = reply_of(sock)
    # The server's own bound (h11_max_incomplete_event_size): the headers still arriving
    # are refused at 64 KiB, not kept.
    assert (status, closed) == (400, True)
    # Large but bounded headers are fine.
    r = api.http.get("/healthz", headers={f"X-Pad-{i}": "a" * 1000 for i in range(40)})
    assert r.status_code == 200
    r = api.http.get(
        "/v1/sources",
        headers={
            "Authorization": f"Bearer {GATEWAY_TOKEN}",
            "X-Memjobs-Owner": "a",
            **{f"X-Pad-{i}": "a" * 1000 for i in range(40)},
        },
    )
    assert r.status_code == 200


def test_a_flood_of_readiness_probes_costs_one_round_of_pings() -> None:
    """The guard alone (ASGI): /readyz is outside every limit, so its answer is shared:
    50 probes at once run the route once; a probe a second later runs it again."""
    import asyncio

    from memjobs_worker.http.guard import READY_REUSE_S

    runs = 0

    async def app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal runs
        runs += 1
        await asyncio.sleep(0.05)  # the pings
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b'{"status":"ready"}'})

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    guard = guard_of(app)
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/readyz",
        "headers": [],
        "client": ("127.0.0.1", 5000),
        "query_string": b"",
    }

    async def probe() -> list[Any]:
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        await guard(dict(scope), receive, send)
        return sent

    async def flood() -> list[list[Any]]:
        first = await asyncio.gather(*(probe() for _ in range(50)))
        await asyncio.sleep(READY_REUSE_S + 0.1)
        return [*first, await probe()]

    replies = asyncio.run(flood())
    assert runs == 2
    assert all(r[0]["status"] == 200 and r[1]["body"] == b'{"status":"ready"}' for r in replies)
