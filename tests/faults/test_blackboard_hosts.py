"""A session moves between two gateway hosts: host A appends its L0 blackboard
(through Redis, the Python client), host B — another network namespace, which
cannot reach host A nor this machine's loopback — restores the same entries in
event order over the HTTPS API. Memjobs' Redis and API are reached at a
service namespace's address (forwarded to the test session's servers), as
gateways reach them in production.

Skipped (with the reason) where namespaces cannot be made; CI runs it as root.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memjobs_client import MemjobsClient, SessionBlackboard
from memjobs_client.contracts import owner_key
from tests.support.forward import Forwarder
from tests.support.http import GATEWAY_TOKEN, HOST_TOKEN, Api, self_signed_certificate
from tests.support.netns import Topology, netns_unavailable, run_in

OWNER = "moving-session@example.com"
SESSION = "s-moves"

pytestmark = pytest.mark.fault


@pytest.fixture
def topo() -> Iterator[Topology]:
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    topology = Topology(["svc", "gwa", "gwb"])
    try:
        topology.create()
        yield topology
    finally:
        topology.destroy()


def entry(seq: int, **extra: Any) -> dict[str, Any]:
    return {
        "entry_id": f"e-{seq}",
        "seq": seq,
        "at": datetime.now(UTC).isoformat(),
        "trust": "runtime" if seq % 2 else "user",
        "priority": seq,
        "kind": "task_admitted",
        "result": f"第 {seq} 步：已完成",
        "evidence": [f"turn:{seq}", f"task:t-{seq}"],
        **extra,
    }


def test_a_blackboard_written_on_one_host_is_restored_on_another(
    topo: Topology, api_factory: Callable[..., Api], tmp_path: Path
) -> None:
    svc = topo.address("svc")
    cert, key = self_signed_certificate(tmp_path, svc)
    api = api_factory(api_tls_cert=cert, api_tls_key=key, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    redis_url = api.harness.settings.redis.url
    assert redis_url is not None  # the test session's own Redis
    redis_port = int(redis_url.rsplit(":", 1)[1].split("/", 1)[0])
    api_port = int(api.url.rsplit(":", 1)[1])
    with Forwarder(topo.ns("svc"), svc, redis_port) as redis_door, Forwarder(topo.ns("svc"), svc, api_port) as api_door:

        def gateway() -> tuple[MemjobsClient, SessionBlackboard]:
            client = MemjobsClient(f"redis://{svc}:{redis_door.port}/0", timeout_s=10)
            return client, SessionBlackboard(
                client, api_url=f"https://{svc}:{api_door.port}", token=GATEWAY_TOKEN, cafile=str(cert), timeout_s=30
            )

        def on_host_a() -> int:
            client, board = gateway()
            try:
                queued = board.append(OWNER, SESSION, [entry(s) for s in (4, 2, 5)])  # out of order
                queued += board.append(OWNER, SESSION, [entry(1), entry(3), entry(2, result="again")])
                return queued
            finally:
                client.close()

        assert run_in(topo.ns("gwa"), on_host_a) == 6
        api.harness.drain(60)

        def on_host_b() -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
            client, board = gateway()
            try:
                try:  # another host: this machine's loopback API is not there
                    socket.create_connection(("127.0.0.1", api_port), timeout=5).close()
                    local = True
                except OSError:
                    local = False
                return board.restore(OWNER, SESSION), board.restore("someone-else", SESSION), local
            finally:
                client.close()

        restored, others, reached_loopback = run_in(topo.ns("gwb"), on_host_b)
    assert not reached_loopback
    assert [(e["seq"], e["entry_id"]) for e in restored] == [(s, f"e-{s}") for s in (1, 2, 3, 4, 5)]
    # e-2 went twice, in two messages the workers may take in either order: the store
    # keeps the one it received first, every field of it, and only that one.
    assert restored[1] in ({**entry(2), "at": restored[1]["at"]}, {**entry(2, result="again"), "at": restored[1]["at"]})
    assert others == []
    assert len(api.harness.runtime.blackboard.restore(owner_key(OWNER), SESSION)) == 5
