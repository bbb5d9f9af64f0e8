"""The memory tool over HTTP (USER.md, MEMORY.md) and the memory audit for
operators, over real HTTP against the test session's PostgreSQL."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from memjobs_client.contracts import owner_key
from tests.support.harness import REPO
from tests.support.http import GATEWAY_TOKEN, HOST_TOKEN, Api, problem

MEM, USER = "MEMORY.md", "USER.md"
CONTEXT = {"session": "s/7 é", "turn": "t-2", "trace": "00-4bf92f3577b34da6-01"}  # ids as sessions have them


def edits(
    api: Api,
    *items: dict[str, Any],
    owner: str = "alice",
    token: str | None = None,
    context: dict[str, Any] | None = None,
) -> Any:
    body: dict[str, Any] = {"owner_id": owner, "edits": list(items)}
    if context is not None:
        body["context"] = context
    return api.post("/v1/memory/edits", body, token)


def doc(api: Api, name: str, owner: str = "alice", token: str | None = None) -> dict[str, Any]:
    r = api.get(f"/v1/memory/documents/{name}", owner=owner, token=token)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_read_append_replace_and_delete_in_one_turn(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    both = api.get("/v1/memory/documents", owner="alice").json()
    assert both["documents"] == [
        {"doc": USER, "scope": "user", "content": "", "version": 0},
        {"doc": MEM, "scope": "memory", "content": "", "version": 0},
    ]
    assert both["provider"] == {"protocolVersion": 2, "key": "markdown", "label": "Markdown files"}
    r = edits(
        api,
        {"op": "append", "doc": MEM, "text": "- 住在杭州"},
        {"op": "append", "doc": MEM, "text": "- likes tea"},
        {"op": "append", "doc": USER, "text": "- call me Lin"},
        context=CONTEXT,
    )
    assert r.status_code == 200, r.text
    assert r.json()["changed"] == 2
    assert [(e["op"], e["doc"], e["applied"], e["version"]) for e in r.json()["edits"]] == [
        ("append", MEM, True, 1),
        ("append", MEM, True, 1),
        ("append", USER, True, 1),
    ]
    # "那条记错了" and "忘掉它": an exact replace, and a replace by nothing (a delete).
    r = edits(
        api,
        {"op": "replace", "doc": MEM, "old_text": "杭州", "new_text": "上海"},
        {"op": "replace", "doc": MEM, "old_text": "- likes tea", "new_text": ""},
    )
    assert r.status_code == 200, r.text
    assert r.json()["documents"] == [{"doc": MEM, "scope": "memory", "content": "- 住在上海", "version": 2}]
    assert doc(api, MEM) == {"doc": MEM, "scope": "memory", "content": "- 住在上海", "version": 2}
    again = edits(api, {"op": "append", "doc": USER, "text": "- call me Lin"})
    assert again.json()["changed"] == 0 and again.json()["edits"][0]["reason"] == "duplicate"
    assert doc(api, MEM, owner="bob")["version"] == 0  # owners are isolated


def test_not_found_and_ambiguous_are_problems_and_the_turn_writes_nothing(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    assert edits(api, {"op": "append", "doc": MEM, "text": "- likes tea\n- buys tea"}).status_code == 200
    missing = problem(
        edits(
            api,
            {"op": "append", "doc": MEM, "text": "- walks daily"},
            {"op": "replace", "doc": MEM, "old_text": "coffee", "new_text": "juice"},
        ),
        "not_found",
        404,
    )
    assert missing["detail"].startswith("edits[1] (replace in MEMORY.md)")
    twice = problem(edits(api, {"op": "replace", "doc": MEM, "old_text": "tea", "new_text": "milk"}), "ambiguous", 409)
    assert twice["detail"].startswith("edits[0]")
    # Not found even when the replacement is already there: asked by a gateway, the old text is missing.
    problem(edits(api, {"op": "replace", "doc": MEM, "old_text": "coffee", "new_text": "tea"}), "not_found", 404)
    assert doc(api, MEM) == {"doc": MEM, "scope": "memory", "content": "- likes tea\n- buys tea", "version": 1}


def test_assistant_md_is_refused_and_secrets_are_refused_on_every_edit(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    problem(api.get("/v1/memory/documents/ASSISTANT.md", owner="alice"), "forbidden_document", 422)
    problem(edits(api, {"op": "append", "doc": "ASSISTANT.md", "text": "- be rude"}), "forbidden_document", 422)
    edits(api, {"op": "append", "doc": MEM, "text": "- router password: ask me"})
    for edit in (
        {"op": "append", "doc": MEM, "text": "my password is hunter2!"},
        {"op": "replace", "doc": MEM, "old_text": "ask me", "new_text": "Tr0ub4dor&3"},
    ):
        problem(edits(api, {"op": "append", "doc": USER, "text": "- fine"}, edit), "sensitive_content", 422)
    assert doc(api, USER)["version"] == 0 and doc(api, MEM)["version"] == 1
    problem(edits(api, {"op": "append", "doc": MEM, "old_text": "x"}), "validation", 422)
    problem(edits(api, {"op": "append", "doc": MEM, "text": "- x"}, context={"turn": "line\nbreak"}), "validation", 422)
    stored = json.dumps([e.as_dict() for e in api.harness.runtime.audit.entries()])
    assert "hunter2" not in stored and "Tr0ub4dor" not in stored and "be rude" not in stored


def test_a_secret_split_across_two_requests_gets_the_same_refusal_as_one_in_one_edit(
    api_factory: Callable[..., Api],
) -> None:
    api = api_factory(worker=False)
    assert edits(api, {"op": "append", "doc": USER, "text": "- 我的银行卡密码是"}).status_code == 200
    refused = problem(edits(api, {"op": "append", "doc": USER, "text": "- 739164"}), "sensitive_content", 422)
    assert refused["detail"].startswith("edits[0] (append in USER.md)")
    assert "739164" not in json.dumps(refused) and doc(api, USER)["version"] == 1


def test_the_audit_trail_is_for_operators_and_holds_the_gateways_context(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    problem(edits(api, {"op": "append", "doc": MEM, "text": "- x"}), "unauthorized", 401)
    r = edits(
        api,
        {"op": "append", "doc": MEM, "text": "- likes tea"},
        token=GATEWAY_TOKEN,
        context={"source": "realtime", **CONTEXT},
    )
    assert r.status_code == 200, r.text
    problem(
        edits(api, {"op": "replace", "doc": MEM, "old_text": "coffee", "new_text": "x"}, token=GATEWAY_TOKEN),
        "not_found",
        404,
    )
    assert doc(api, MEM, token=GATEWAY_TOKEN)["content"] == "- likes tea"
    problem(api.get("/v1/ops/memory-audit", token=GATEWAY_TOKEN), "forbidden", 403)
    # A page bound past PostgreSQL's bigint (schemathesis found it a 500): refused as such.
    problem(api.get("/v1/ops/memory-audit", token=HOST_TOKEN, params={"before_id": 2**63}), "validation", 422)
    listed = api.get("/v1/ops/memory-audit", token=HOST_TOKEN, params={"owner_key": owner_key("alice"), "limit": 10})
    assert listed.status_code == 200, listed.text
    entries = listed.json()["entries"]
    assert [(e["op"], e["applied"], e["reason"], e["version"], e["source"]) for e in entries] == [
        ("replace", False, "not_found", 1, "memory_tool"),
        ("append", True, None, 1, "realtime"),
    ]
    assert (entries[1]["session"], entries[1]["turn"], entries[1]["trace"]) == (
        "s/7 é",
        "t-2",
        "00-4bf92f3577b34da6-01",
    )
    assert entries[1]["owner_key"] == owner_key("alice") and "alice" not in listed.text
    page = api.get("/v1/ops/memory-audit", token=HOST_TOKEN, params={"limit": 1}).json()
    older = api.get(
        "/v1/ops/memory-audit", token=HOST_TOKEN, params={"limit": 1, "before_id": page["next_before_id"]}
    ).json()
    assert [e["id"] for e in page["entries"] + older["entries"]] == [e["id"] for e in entries]


def test_the_typescript_client_uses_the_memory_tool(api_factory: Callable[..., Api]) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the TypeScript client's tests need Node.js 20+")
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    done = subprocess.run(
        [node, "--test", "test/memory.test.mjs"],
        cwd=REPO / "clients" / "typescript",
        env={
            **os.environ,
            "MEMJOBS_API_URL": api.url,
            "MEMJOBS_API_GATEWAY_TOKEN": GATEWAY_TOKEN,
            "MEMJOBS_API_HOST_TOKEN": HOST_TOKEN,
        },
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "# pass 3" in done.stdout and "# fail 0" in done.stdout, done.stdout[-2000:]


def test_scoped_tokens_read_and_write_only_what_they_name(api_factory: Callable[..., Api]) -> None:
    from memjobs_worker.http.scoped_tokens import issue

    api = api_factory(worker=False, api_token_key="k" * 40)
    settings = api.harness.settings.api
    reader = issue(settings, scopes=["read"], owners=["acme/alice"])
    writer = issue(settings, scopes=["read", "write"], owner_prefix="acme/")
    assert doc(api, MEM, owner="acme/alice", token=reader)["version"] == 0
    problem(
        edits(api, {"op": "append", "doc": MEM, "text": "- x"}, owner="acme/alice", token=reader), "forbidden", 403
    )  # read only: no edit
    problem(api.get("/v1/memory/documents", owner="acme/bob", token=reader), "forbidden", 403)
    assert edits(api, {"op": "append", "doc": MEM, "text": "- x"}, owner="acme/bob", token=writer).status_code == 200
    problem(
        edits(api, {"op": "append", "doc": MEM, "text": "- x"}, owner="other/carol", token=writer), "forbidden", 403
    )
    problem(api.get("/v1/ops/memory-audit", token=writer), "forbidden", 403)  # across owners: admin


def test_the_memory_tool_on_a_hosts_provider(api_factory: Callable[..., Api], monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.records_service import RecordsService

    with RecordsService() as records:
        monkeypatch.setenv("RECORDS_SERVICE_URL", records.url)
        api = api_factory(worker=False, memory_docs_provider="tests.support.memory_adapter:from_env")
        assert api.get("/v1/memory/documents", owner="acme/alice").json()["provider"] == {
            "protocolVersion": 2,
            "key": "company-memory",
            "label": "Company Memory",
        }
        r = edits(api, {"op": "append", "doc": USER, "text": "- 叫我小林"}, owner="acme/alice", context=CONTEXT)
        assert r.status_code == 200, r.text
        assert records.body("acme", "alice", "profile") == "- 叫我小林"  # the adapter's own records
        assert records.writes[-1]["meta"] == {"source": "memory_tool", **CONTEXT}
        problem(
            edits(api, {"op": "replace", "doc": USER, "old_text": "老王", "new_text": "x"}, owner="acme/alice"),
            "not_found",
            404,
        )
