"""A session's L0 blackboard over HTTP: ``POST`` and ``GET
/v1/sessions/{id}/blackboard`` (the ``session`` scope, owner-scoped), paged in
event order; secrets refused; the TypeScript client's ``SessionBlackboard``."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from memjobs_client import SessionBlackboard
from memjobs_client.blackboard import BlackboardApiError
from memjobs_client.contracts import owner_key
from tests.support.harness import REPO
from tests.support.http import GATEWAY_TOKEN, HOST_TOKEN, Api, problem
from tests.support.polling import wait_for

OWNER = "board-http@example.com"


def entry(seq: int, **extra: Any) -> dict[str, Any]:
    return {
        "entry_id": f"e-{seq}",
        "seq": seq,
        "at": datetime.now(UTC).isoformat(),
        "trust": "runtime",
        "priority": 1,
        "result": f"step {seq}",
        "evidence": [f"turn:{seq}"],
        **extra,
    }


def test_entries_are_appended_restored_in_pages_and_scoped_to_their_owner(api_factory: Callable[..., Api]) -> None:
    api = api_factory(api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    r = api.post(
        "/v1/sessions/s-http/blackboard",
        {"owner_id": OWNER, "entries": [entry(s) for s in (5, 2, 4)]},
        token=GATEWAY_TOKEN,
    )
    assert r.status_code == 202, r.text
    assert r.json() == {"session_id": "s-http", "entries": 3, "status": "queued"}
    api.post(
        "/v1/sessions/s-http/blackboard", {"owner_id": OWNER, "entries": [entry(1), entry(3)]}, token=GATEWAY_TOKEN
    )
    path = "/v1/sessions/s-http/blackboard"
    wait_for(lambda: len(api.get(path, owner=OWNER, token=GATEWAY_TOKEN).json()["entries"]) == 5, 60, "five entries")
    first = api.get(path, owner=OWNER, token=GATEWAY_TOKEN, params={"limit": 2}).json()
    assert [e["seq"] for e in first["entries"]] == [1, 2]
    assert first["next_after"] == {"seq": 2, "entry_id": "e-2"}
    rest = api.get(path, owner=OWNER, token=GATEWAY_TOKEN, params={"after_seq": 2, "after_id": "e-2"}).json()
    assert [e["seq"] for e in rest["entries"]] == [3, 4, 5] and rest["next_after"] is None
    assert rest["entries"][0] == {**entry(3), "kind": None, "at": rest["entries"][0]["at"]}
    other = api.get(path, owner="someone-else", token=GATEWAY_TOKEN).json()
    assert other["entries"] == []
    assert api.get(path, owner=OWNER).status_code == 401
    problem(api.get(path, owner=OWNER, token=GATEWAY_TOKEN, params={"after_seq": 2}), "validation", 422)
    # A sequence past PostgreSQL's bigint is refused as such, not a database error (500).
    beyond = {"after_seq": 2**63, "after_id": "e-2"}
    problem(api.get(path, owner=OWNER, token=GATEWAY_TOKEN, params=beyond), "validation", 422)
    assert len(api.harness.runtime.blackboard.restore(owner_key(OWNER), "s-http")) == 5
    # The Python producer's restore (plain HTTP is allowed to a loopback API only).
    board = SessionBlackboard(api.harness.client, api_url=api.url, token=GATEWAY_TOKEN)
    assert [e["seq"] for e in board.restore(OWNER, "s-http")] == [1, 2, 3, 4, 5]
    with pytest.raises(BlackboardApiError) as refused:
        SessionBlackboard(api.harness.client, api_url=api.url, token="wrong").restore(OWNER, "s-http")
    assert (refused.value.status, refused.value.reason) == (401, "unauthorized")


def test_a_secret_refuses_the_whole_append_and_nothing_is_queued(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    r = api.post(
        "/v1/sessions/s-secret/blackboard",
        {"owner_id": OWNER, "entries": [entry(1), entry(2, evidence=["ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2])]},
    )
    body = problem(r, "sensitive_content", 422)
    assert "a1B2c3D4" not in r.text and "entries" in body["detail"]
    assert api.harness.queues()["memjobs_tasks"]["ready"] == 0


@pytest.mark.skipif(
    shutil.which("node") is None, reason="node is not installed: the TypeScript client's tests need Node.js 20+"
)
def test_the_typescript_client_moves_a_blackboard_between_clients(api_factory: Callable[..., Api]) -> None:
    api = api_factory(api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    done = subprocess.run(
        [str(shutil.which("node")), "--test", "test/blackboard.test.mjs"],
        cwd=REPO / "clients" / "typescript",
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MEMJOBS_API_URL": api.url, "MEMJOBS_API_GATEWAY_TOKEN": GATEWAY_TOKEN},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# pass 2" in done.stdout and "# skipped 0" in done.stdout
