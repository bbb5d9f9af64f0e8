"""``memjobs up`` serves the HTTP API beside its workers: the address is printed
and written to the stack file, and a request goes all the way through the real
worker processes. With the default port taken, ``up`` serves on a free one."""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from tests.support.cli import (
    STARTUP_TIMEOUT_S,
    Up,
    cli_env,
    scratch_dir,
)
from tests.support.polling import wait_for


@contextmanager
def holding(port: int, timeout_s: float = 60) -> Iterator[None]:
    """Listen on ``port`` for the duration. Another test process (``make test``
    runs two) may be serving on it for a while: wait for it to let go, and skip
    if it never does, since then the port's holder is not this test."""
    sock = socket.socket()
    try:
        wait_for(lambda: _bound(sock, port), timeout_s, f"port {port} free to hold", poll_s=0.2)
    except AssertionError:
        sock.close()
        pytest.skip(f"port {port} stayed taken by another process for {timeout_s:g} s")
    try:
        sock.listen(1)
        yield
    finally:
        sock.close()


def _bound(sock: socket.socket, port: int) -> bool:
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


def wait_for_api_url(up: Up) -> str:
    """The API URL from the stack file, once written (``up`` is an external process:
    polling with a deadline is the only signal)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if up.proc.poll() is not None:
            pytest.fail(f"memjobs up exited with {up.proc.returncode}:\n{up.text()}")
        try:
            url = json.loads(up.stack_file.read_text()).get("api_url")
        except (OSError, ValueError):
            url = None
        if url:
            return str(url)
        time.sleep(0.1)
    pytest.fail(f"no api_url in the stack file after {STARTUP_TIMEOUT_S:.0f} s:\n{up.text()}")


@pytest.mark.slow
def test_memjobs_up_serves_the_api_and_names_it_in_the_stack_file() -> None:
    with scratch_dir("api") as base:
        data_dir = base / "data"
        env = cli_env(data_dir, MEMJOBS_EXTRACT_DELAY_MS="20", MEM0_DIR=str(base / "mem0"))
        with holding(8780):
            up = Up(data_dir, env, base / "up.out")
            try:
                url = wait_for_api_url(up)
                assert url.startswith("http://127.0.0.1:") and not url.endswith(":8780")
                assert "port 8780 is taken" in up.text()
                with httpx.Client(base_url=url, timeout=30) as http:
                    assert http.get("/healthz").json() == {"status": "ok"}
                    assert http.get("/readyz").status_code == 200
                    r = http.post("/v1/remember", json={"owner_id": "up-owner", "text": "I like oolong tea"})
                    assert r.status_code == 202, r.text
                    source_id = r.json()["source_id"]

                    def states() -> list[str]:
                        listed = http.get("/v1/sources", headers={"X-Memjobs-Owner": "up-owner"}).json()
                        return [s["state"] for s in listed["sources"]]

                    # the real worker processes learn it
                    wait_for(lambda: states() == ["learned"], 60, "the source learned", poll_s=0.1)
                    hits = http.post("/v1/recall", json={"owner_id": "up-owner", "query": "oolong"}).json()
                    assert [h["source_ids"] for h in hits["memories"]] == [[source_id]]
                assert f"API {url}" in up.text()
                up.proc.send_signal(signal.SIGTERM)
                assert up.proc.wait(90) == 0, up.text()
                assert "memjobs stopped" in up.text()
            finally:
                up.close()
