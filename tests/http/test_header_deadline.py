"""The deadline on a request's headers (``MEMJOBS_API_HEADER_TIMEOUT_MS``,
workers/memjobs_worker/http/deadline.py), over real sockets against the API served
in process by the same uvicorn configuration, with each parser (h11, httptools).

A trickling client sends a header byte every :data:`TRICKLE_S`, far inside the
deadline (no single gap explains the close); the close is an event, read as EOF
(or a reset) with a generous socket timeout, and timed: at or after the deadline,
before the deadline plus :data:`SLACK_S`.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from tests.http.test_http_limits import certificate  # noqa: F401  (fixture: a self-signed pair)
from tests.support.http import GATEWAY_TOKEN, HOST_TOKEN, Api, connect, reply_of

DEADLINE_MS = 1000
DEADLINE_S = DEADLINE_MS / 1000
#: Generous on a shared 2-core machine, and under the 5 s keep-alive timeout (which the
#: trickle cancels byte by byte anyway), so only the header deadline explains a close.
SLACK_S = 3.5
TRICKLE_S = 0.2
PARSERS = ["h11", "httptools"]
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def port_of(api: Api) -> int:
    return int(api.url.rsplit(":", 1)[1])


def serve(api_factory: Callable[..., Api], parser: str, deadline_ms: int = DEADLINE_MS, **overrides: object) -> Api:
    return api_factory(
        worker=False,
        api_gateway_token=GATEWAY_TOKEN,
        api_host_token=HOST_TOKEN,
        api_header_timeout_ms=deadline_ms,
        api_http_parser=parser,
        **overrides,
    )


class Trickle:
    """Sends ``X-Slow: aaaa…`` to each socket a byte at a time, every :data:`TRICKLE_S`,
    until the server closes it (or :meth:`stop`)."""

    def __init__(self, socks: list[socket.socket]) -> None:
        self.socks = list(socks)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Trickle:
        for sock in self.socks:
            sock.sendall(b"X-Slow: ")
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        self.thread.join(10)

    def _run(self) -> None:
        live = list(self.socks)
        while live and not self.stopped.wait(TRICKLE_S):
            for sock in list(live):
                try:
                    sock.send(b"a")
                except OSError:  # closed by the server
                    live.remove(sock)


def trickle_until_closed(sock: socket.socket, since: float) -> float:
    """Send ``sock`` a header byte every :data:`TRICKLE_S` until the server closes it;
    seconds since ``since`` (one thread: a TLS socket is not shared between two)."""
    sock.sendall(b"X-Slow: ")
    sock.settimeout(TRICKLE_S)
    while time.monotonic() - since < DEADLINE_S + SLACK_S + 10:
        try:
            sock.send(b"a")
            if not sock.recv(65536):
                break
        except TimeoutError:
            continue  # still open: the next byte
        except OSError:  # reset, broken pipe, TLS torn down: closed
            break
    return time.monotonic() - since


def seconds_until_closed(sock: socket.socket, since: float) -> float:
    """Read until the server closes ``sock`` (EOF or reset); seconds since ``since``."""
    sock.settimeout(DEADLINE_S + SLACK_S + 10)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - since


def refused(api: Api, verify: ssl.SSLContext | None = None) -> float:
    """``memjobs_api_refused_total{reason="header_timeout"}`` of ``api``."""
    metrics = (httpx.get(f"{api.url}/metrics", verify=verify, timeout=30) if verify else api.get("/metrics")).text
    for line in metrics.splitlines():
        if line.startswith('memjobs_api_refused_total{reason="header_timeout"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("parser", PARSERS)
def test_headers_trickled_a_byte_at_a_time_are_cut_at_the_deadline(
    api_factory: Callable[..., Api], parser: str
) -> None:
    api = serve(api_factory, parser)
    started = time.monotonic()
    with connect(port_of(api)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        elapsed = trickle_until_closed(sock, started)
    assert DEADLINE_S <= elapsed < DEADLINE_S + SLACK_S, elapsed
    assert refused(api) == 1


@pytest.mark.parametrize("parser", PARSERS)
def test_a_connection_that_sends_nothing_is_cut_at_the_deadline(api_factory: Callable[..., Api], parser: str) -> None:
    api = serve(api_factory, parser)
    started = time.monotonic()
    with connect(port_of(api)) as sock:
        elapsed = seconds_until_closed(sock, started)
    assert DEADLINE_S <= elapsed < DEADLINE_S + SLACK_S, elapsed


@pytest.mark.parametrize("parser", PARSERS)
def test_slow_but_honest_headers_and_a_body_after_the_deadline_are_served(
    api_factory: Callable[..., Api], parser: str
) -> None:
    """Headers in two pieces well inside the deadline: 200. The body is the body
    timeout's: one sent after the header deadline has passed is still read."""
    api = serve(api_factory, parser)
    pause = threading.Event()
    with connect(port_of(api)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        pause.wait(DEADLINE_S / 4)
        sock.sendall(b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n")
        status, _, body, closed = reply_of(sock)
    assert (status, closed) == (200, True), body
    payload = json.dumps({"owner_id": "alice", "query": "green tea"}).encode()
    with connect(port_of(api)) as sock:
        sock.sendall(
            f"POST /v1/recall HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            f"Authorization: Bearer {GATEWAY_TOKEN}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload[:5]
        )
        pause.wait(DEADLINE_S * 1.5)
        sock.sendall(payload[5:])
        status, _, body, _ = reply_of(sock)
    assert status == 200, body
    assert refused(api) == 0


@pytest.mark.parametrize("pipelined", [False, True], ids=["keep-alive", "pipelined"])
@pytest.mark.parametrize("parser", PARSERS)
def test_a_second_request_trickled_on_a_kept_alive_connection_is_cut(
    api_factory: Callable[..., Api], parser: str, pipelined: bool
) -> None:
    api = serve(api_factory, parser)
    with connect(port_of(api)) as sock:
        second = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        sock.sendall(HEALTHZ + (second if pipelined else b""))
        assert reply_of(sock, then_closed=False)[0] == 200
        # The deadline runs from the next byte after the first reply (a pipelined head
        # arrived while the first request was at work: not a new request yet).
        started = time.monotonic()
        if not pipelined:
            sock.sendall(second)
        elapsed = trickle_until_closed(sock, started)
    # The server's timer may fire a moment early (the event loop's timers have
    # millisecond resolution) and, pipelined, its clock starts as it sends the
    # first reply, before this side has read it and taken ``started``: 0.9998 s
    # was seen both ways. 50 ms is far below any early cut this test is for.
    assert DEADLINE_S - 0.05 <= elapsed < DEADLINE_S + SLACK_S, elapsed
    assert refused(api) == 1


@pytest.mark.parametrize("parser", PARSERS)
def test_other_clients_are_answered_while_trickling_connections_are_held(
    api_factory: Callable[..., Api], parser: str
) -> None:
    deadline_s = 3.0  # wide enough to answer the others on a loaded machine while all are held
    api = serve(api_factory, parser, deadline_ms=int(deadline_s * 1000))
    recall = {"owner_id": "alice", "query": "green tea"}
    headers = {"Authorization": f"Bearer {GATEWAY_TOKEN}"}
    assert api.post("/v1/recall", recall, token=GATEWAY_TOKEN).status_code == 200  # warm
    started = time.monotonic()  # before the first connection opens: each deadline runs from its own
    held = [connect(port_of(api), f"127.0.2.{i + 1}") for i in range(40)]
    try:
        for sock in held:
            sock.sendall(b"GET /v1/sources HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        with Trickle(held):
            answered = [
                api.get("/healthz").status_code,
                api.http.post("/v1/recall", json=recall, headers=headers).status_code,
                api.get("/healthz").status_code,
            ]
            during = time.monotonic() - started
            closes = [seconds_until_closed(sock, started) for sock in held]
    finally:
        for sock in held:
            sock.close()
    assert answered == [200, 200, 200]
    assert during < deadline_s, "the other clients were not answered while the trickles were held"
    assert all(deadline_s <= c < deadline_s + SLACK_S for c in closes), closes
    assert refused(api) == len(held)


def test_headers_trickled_over_tls_are_cut_at_the_deadline(
    api_factory: Callable[..., Api],
    certificate: tuple[Path, Path],  # noqa: F811
) -> None:
    cert, key = certificate
    api = serve(api_factory, "h11", api_tls_cert=cert, api_tls_key=key)
    context = ssl.create_default_context(cafile=str(cert))
    with connect(port_of(api)) as raw, context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        started = time.monotonic()  # the handshake is done: the deadline runs from here at least
        sock.sendall(HEALTHZ)
        assert reply_of(sock, then_closed=False)[0] == 200
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        elapsed = trickle_until_closed(sock, started)
    assert DEADLINE_S <= elapsed < DEADLINE_S + SLACK_S, elapsed
    assert refused(api, verify=context) == 1


# -- the parts alone -----------------------------------------------------------------------


@pytest.mark.parametrize("parser", PARSERS)
def test_the_protocol_holds_uvicorns_and_subclasses_none_of_it(parser: str) -> None:
    import asyncio

    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    from memjobs_worker.http.deadline import HeaderDeadline, header_deadline

    uvicorns: type[asyncio.Protocol] = import_from_string(HTTP_PROTOCOLS[parser])
    protocol = header_deadline(parser, 1.0, lambda: None)
    assert protocol.rule.held_class is uvicorns
    assert not issubclass(protocol, uvicorns)
    assert [c for c in protocol.__mro__ if c.__module__.startswith("uvicorn")] == []
    assert issubclass(protocol, HeaderDeadline)


class Connection:
    """What MarksRequests tells, recorded."""

    def __init__(self) -> None:
        self.open_requests = 0
        self.told: list[str] = []

    def request_started(self) -> None:
        self.open_requests += 1
        self.told.append("started")

    def request_finished(self) -> None:
        self.open_requests -= 1
        self.told.append("finished")


def test_a_request_is_at_work_from_the_call_until_its_last_body_message() -> None:
    """The response complete (its last body message), the request is done for the deadline
    even while the application still runs (a background task): the next request's first
    byte must start the deadline again. An application that fails is done when it returns."""
    import asyncio

    from memjobs_worker.http.deadline import CONNECTION, MarksRequests

    connection = Connection()
    seen: list[int] = []

    async def app(scope: dict[str, object], receive: object, send: Callable[..., Awaitable[object]]) -> None:
        if scope["path"] == "/fails":
            raise RuntimeError("before any reply")
        seen.append(connection.open_requests)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        seen.append(connection.open_requests)
        await send({"type": "http.response.body", "body": b"b"})
        seen.append(connection.open_requests)  # the background work, after the reply

    async def send(message: object) -> None:
        pass

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def run() -> None:
        marked = MarksRequests(app)  # type: ignore[arg-type]
        await marked({"type": "http", "path": "/", "state": {CONNECTION: connection}}, receive, send)
        with pytest.raises(RuntimeError):
            await marked({"type": "http", "path": "/fails", "state": {CONNECTION: connection}}, receive, send)
        await marked({"type": "http", "path": "/", "state": {}}, receive, send)  # not ours: untold

    asyncio.run(run())
    assert seen == [
        1,
        1,
        0,  # ours: at work until the last body message
        0,
        0,
        0,
    ]  # a scope without the connection (not served by HeaderDeadline)
    assert connection.told == ["started", "finished", "started", "finished"]
    assert connection.open_requests == 0
