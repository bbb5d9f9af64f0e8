"""The HTTP API against the test session's real Redis and PostgreSQL: a real
uvicorn on a free loopback port, an in-process Dramatiq worker behind it."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from memjobs_worker.http.serve import KEEP_ALIVE_S, ApiServer
from memjobs_worker.runtime import open_door
from memjobs_worker.settings import Settings
from tests.support.api_process import ApiProcess, api_process
from tests.support.cli import run_cli
from tests.support.harness import Harness

GATEWAY_TOKEN = "gateway-token-0123456789abcdef"
HOST_TOKEN = "host-token-0123456789abcdef-xyz"


def api_client(url: str) -> httpx.Client:
    """A client of the API that lets an idle connection go before the server
    does: at the same expiry as the server's (httpx's default, 5 s, is the
    server's too), a request sent on a connection the server is closing that
    instant is reset (``ECONNRESET``), the race a test waiting about 5 s met."""
    return httpx.Client(base_url=url, timeout=30, limits=httpx.Limits(keepalive_expiry=KEEP_ALIVE_S / 2))


@dataclass
class Api:
    """A running API, its harness (worker, store) and an HTTP client."""

    url: str
    server: ApiServer
    harness: Harness
    http: httpx.Client

    def auth(self, token: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"} if token else {}

    def post(self, path: str, body: Any, token: str | None = None, **kw: Any) -> httpx.Response:
        return self.http.post(path, json=body, headers=self.auth(token), **kw)

    def get(self, path: str, owner: str | None = None, token: str | None = None, **kw: Any) -> httpx.Response:
        headers = self.auth(token)
        if owner is not None:
            from urllib.parse import quote

            headers["X-Memjobs-Owner"] = quote(owner, safe="")
        return self.http.get(path, headers=headers, **kw)


@pytest.fixture
def api_factory(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> Iterator[Callable[..., Api]]:
    """Start an API (and a worker) with these settings overrides; all stopped at the end."""
    running: list[Api] = []

    def start(*, worker: bool = True, settings: Settings | None = None, **overrides: Any) -> Api:
        s = settings or make_settings(api_port=0, **overrides)
        harness = harness_factory(s)
        if worker:
            harness.start_worker()
        server = ApiServer(s, harness.endpoints)
        url = server.start()
        api = Api(url, server, harness, api_client(url))
        running.append(api)
        return api

    yield start
    for api in running:
        api.http.close()
        assert api.server.stop(), "the API did not stop"


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    return sock


def reply_of(
    sock: socket.socket, timeout_s: float = 10, then_closed: bool = True
) -> tuple[int, dict[str, str], bytes, bool]:
    """Status, headers, body of the one reply on ``sock``, and whether the server then
    closed (not looked at with ``then_closed=False``: another reply follows)."""
    sock.settimeout(timeout_s)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    if not then_closed:
        return int(lines[0].split()[1]), headers, body, False
    try:
        closed = sock.recv(1) == b""
    except TimeoutError:
        closed = False
    except ConnectionResetError:  # closed with bytes of ours unread
        closed = True
    return int(lines[0].split()[1]), headers, body, closed


def still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


@pytest.fixture
def api_process_factory(make_settings: Callable[..., Settings], tmp_path: Path) -> Iterator[Callable[..., ApiProcess]]:
    """Start ``memjobs api`` as operators run it (its own process, these settings
    overrides; :func:`~tests.support.api_process.api_process`); each is stopped at
    the end. Its log is ``ApiProcess.log``."""
    count = iter(range(1_000_000))
    with ExitStack() as started:

        def start(**overrides: Any) -> ApiProcess:
            log = tmp_path / f"api-{next(count)}.log"
            return started.enter_context(api_process(make_settings(api_port=0, **overrides), log))

        yield start


TS = "2026-11-30T10:00:00Z"


def turn(text: str, role: str = "user") -> dict[str, str]:
    return {"role": role, "text": text, "ts": TS}


def problem(response: Any, reason: str, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["type"] == f"urn:memjobs:problem:{reason}" and body["reason"] == reason
    assert body["status"] == status and body["title"]
    return body


def remember(api: Api, owner: str, text: str) -> str:
    r = api.post("/v1/remember", {"owner_id": owner, "text": text})
    assert r.status_code == 202, r.text
    assert r.json()["status"] == "queued"
    return str(r.json()["source_id"])


def forget_at_every_door(api: Api, env: dict[str, str], owner: str, source_id: str) -> dict[str, Any]:
    """One forget of ``source_id`` by ``owner`` through the HTTP API, the CLI and a
    door's personal memory (the service both call): (status code, reason or
    status), (exit code, status) and the service's :class:`~memjobs_client.ForgetOutcome`."""
    http = api.post("/v1/forget", {"owner_id": owner, "source_id": source_id})
    body = http.json()
    cli = run_cli(env, "forget", "--owner", owner, "--source", source_id, "--json")
    door = open_door(api.harness.settings, api.harness.endpoints)
    try:
        outcome = door.personal_memory.forget(owner, source_id)
    finally:
        door.close()
        door.client.close()
    return {
        "http": (http.status_code, body.get("reason") if http.status_code >= 400 else body["status"]),
        "cli": (cli.code, cli.json()["status"]),
        "client": outcome,
    }


def self_signed_certificate(directory: Path, address: str = "127.0.0.1") -> tuple[Path, Path]:
    """A one-day certificate and its key, written to ``directory``, for ``address`` and the loopback address."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    names = ",".join(f"IP:{ip}" for ip in dict.fromkeys((address, "127.0.0.1")))
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={address}"]
        + ["-addext", f"subjectAltName={names}", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key
