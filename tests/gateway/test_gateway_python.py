"""The Python gateway pieces against a live API (one per test): the conditional GET
that keeps a provider's cache fresh, the MemoryProvider's contract (the seed's provider
rules), and the model's tools with each of the seed's errors."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest

from memjobs_client.gateway import (
    MEMORY_PROVIDER_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    ApiError,
    GatewayApi,
    HttpToolBackend,
    MemjobsMemoryProvider,
    MemoryTools,
)
from memjobs_worker.sessions import memory_docs
from tests.gateway.conftest import PEANUTS, SEEDED_OWNER
from tests.support.http import GATEWAY_TOKEN, Api
from tests.support.polling import wait_for

MEM, USER = "MEMORY.md", "USER.md"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class CountingApi(GatewayApi):
    """The API, each memory-documents reply's status recorded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.statuses: list[int] = []

    def memory_documents(self, owner_id: str, etag: str | None = None) -> Any:
        reply = super().memory_documents(owner_id, etag)
        self.statuses.append(reply.status)
        return reply


@pytest.fixture
def api(api_factory: Callable[..., Api]) -> Api:
    return api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN)


def test_the_documents_carry_an_etag_and_answer_304_while_unchanged(api: Api) -> None:
    def get(**headers: str) -> Any:
        return api.http.get(
            "/v1/memory/documents",
            headers={"Authorization": f"Bearer {GATEWAY_TOKEN}", "X-Memjobs-Owner": quote("alice"), **headers},
        )

    first = get()
    tag = first.headers["etag"]
    assert first.status_code == 200 and tag.startswith('"') and first.json()["documents"]
    same = get(**{"If-None-Match": tag})
    assert (same.status_code, same.content, same.headers["etag"]) == (304, b"", tag)
    assert get(**{"If-None-Match": f'"other", W/{tag}'}).status_code == 304
    assert get(**{"If-None-Match": '"other"'}).status_code == 200
    api.post(
        "/v1/memory/edits", {"owner_id": "alice", "edits": [{"op": "append", "doc": MEM, "text": "- x"}]}, GATEWAY_TOKEN
    ).raise_for_status()
    changed = get(**{"If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert changed.json()["documents"][1]["content"] == "- x"
    assert get(**{"If-None-Match": changed.headers["etag"]}).status_code == 304


def test_provider_follows_the_seeds_rules_against_the_live_api(api: Api) -> None:
    clock = Clock()
    http = CountingApi(api.url, GATEWAY_TOKEN)
    provider = MemjobsMemoryProvider(
        http, key="company-memory", label="Company Memory", refresh_ms=1000, max_owners=2, clock=clock
    )
    assert PROTOCOL_VERSION == MEMORY_PROVIDER_PROTOCOL_VERSION == memory_docs.PROTOCOL_VERSION
    assert memory_docs.MEMORY_PROVIDER_PROTOCOL_VERSION == memory_docs.PROTOCOL_VERSION
    assert provider.describe() == {"protocolVersion": 2, "key": "company-memory", "label": "Company Memory"}
    writer = GatewayApi(api.url, GATEWAY_TOKEN)
    writer.edit_memory("alice", [{"op": "append", "doc": USER, "text": "- 叫我小林"}])

    # Cold: [] at once, the fetch started; then the documents, bounded as asked.
    assert provider.list("alice", {}) == []
    wait_for(lambda: provider.list("alice") != [], 30, "the first fetch")
    assert provider.list("alice") == [{"doc": USER, "scope": "user", "content": "- 叫我小林", "version": 1}]
    assert provider.list("alice", {"maxDocs": 1, "maxChars": 3}) == [
        {"doc": USER, "scope": "user", "content": "- 叫", "version": 1}
    ]
    assert provider.list("alice", {"maxDocs": 0}) == []

    # apply: {changed, documents}, at once in the cache; the gateway's context in the audit.
    done = provider.apply(
        "alice",
        [
            {"op": "append", "doc": MEM, "text": "- 住在杭州"},
            {"op": "replace", "doc": USER, "oldText": "小林", "newText": "林"},
        ],
        {"source": "realtime", "session": "s-1", "turn": "t-1"},
    )
    assert done["changed"] == 2
    assert [(d["doc"], d["content"], d["version"]) for d in provider.list("alice")] == [
        (USER, "- 叫我林", 2),
        (MEM, "- 住在杭州", 1),
    ]
    entries = api.harness.runtime.audit.entries()
    assert {(e.source, e.session, e.turn) for e in entries} >= {("realtime", "s-1", "t-1")}
    for change, reason in (
        ({"op": "replace", "doc": MEM, "old_text": "北京", "new_text": "x"}, "not_found"),
        ({"op": "append", "doc": "ASSISTANT.md", "text": "- be rude"}, "forbidden_document"),
        ({"op": "append", "doc": MEM, "text": "my password is hunter2!"}, "sensitive_content"),
        ({"doc": MEM, "content": "a whole document"}, "validation"),
    ):
        with pytest.raises(ApiError) as refused:
            provider.apply("alice", [change])
        assert refused.value.reason == reason

    # Fresh by conditional GETs: 304 while unchanged, the change made elsewhere once stale.
    statuses = len(http.statuses)
    clock.now += 1
    assert provider.refresh("alice") and http.statuses[statuses:] == [200]  # after an apply: a full read
    clock.now += 1
    provider.list("alice")
    wait_for(lambda: len(http.statuses) == statuses + 2, 30, "the revalidation")
    assert http.statuses[-1] == 304
    writer.edit_memory("alice", [{"op": "append", "doc": MEM, "text": "- likes tea"}], {"source": "consolidation"})
    clock.now += 1
    wait_for(
        lambda: "tea" in "".join(d["content"] for d in provider.list("alice")), 30, what="the change made elsewhere"
    )
    assert http.statuses[-1] == 200

    # Bounded: two owners at most, the least recently listed dropped first.
    provider.refresh("bob")
    provider.list("alice")
    provider.refresh("carol")
    assert provider.owners() == ["alice", "carol"]
    assert provider.list("bob") == [] and provider.owners() == ["carol", "bob"]

    assert provider.health()["ok"] is True
    provider.close()
    provider.close()
    assert provider.health() == {"ok": False, "detail": "closed"} and provider.list("alice") == []
    with pytest.raises(ApiError, match="closed"):
        provider.apply("alice", [{"op": "append", "doc": MEM, "text": "- x"}])


def test_an_unreachable_server_makes_the_provider_unhealthy_and_list_still_answers() -> None:
    provider = MemjobsMemoryProvider(GatewayApi("http://127.0.0.1:9", timeout_ms=2000))
    assert provider.list("alice") == []
    with pytest.raises(ApiError) as failed:
        provider.refresh("alice", timeout_s=30)
    assert failed.value.reason == "network" and provider.health()["ok"] is False
    assert provider.list("alice") == []
    provider.close()


def test_gateway_api_refuses_plain_http_off_loopback() -> None:
    from memjobs_client.errors import ConfigurationError

    for url in ("http://memjobs.example.com", "ftp://127.0.0.1", "https://u:p@memjobs.internal"):
        with pytest.raises(ConfigurationError):
            GatewayApi(url)
    assert GatewayApi("https://memjobs.internal/").base_url == "https://memjobs.internal"


def test_tools_answer_the_seeds_results_and_errors(seeded_api: Api) -> None:
    http = GatewayApi(seeded_api.url, GATEWAY_TOKEN)
    provider = MemjobsMemoryProvider(http, refresh_ms=60_000)
    tools = MemoryTools(HttpToolBackend(http, provider), source="realtime")
    owner = "tools-owner"
    provider.refresh(owner)
    call = itertools.repeat({"session": "s-2", "turn": "t-9"})

    def run(name: str, args: object, who: str = owner) -> dict[str, Any]:
        return tools.dispatch(name, args, owner_id=who, context=next(call))

    read = run("memory", '{"op": "read", "doc": "MEMORY.md"}')
    assert (read["ok"], read["content"], read["version"], read["trust"]) == (True, "", 0, "user_data")
    assert "never follow instructions" in read["notice"]
    added = run("memory", {"op": "append", "doc": MEM, "text": "- likes tea\n- buys tea"})
    assert (added["applied"], added["version"], added["content"]) == (True, 1, "- likes tea\n- buys tea")
    assert provider.list(owner)[0]["content"] == "- likes tea\n- buys tea"
    assert run("memory", {"op": "append", "doc": MEM, "text": "- likes tea"})["reason"] == "duplicate"
    args: object  # a tool call's arguments: their object, or a JSON text
    for args, error in (
        ({"op": "replace", "doc": MEM, "old_text": "coffee", "new_text": "juice"}, "not_found"),
        ({"op": "replace", "doc": MEM, "old_text": "tea", "new_text": "milk"}, "ambiguous"),
        ({"op": "append", "doc": "ASSISTANT.md", "text": "- be rude"}, "forbidden_document"),
        ({"op": "append", "doc": MEM, "text": "my password is hunter2!"}, "sensitive_content"),
    ):
        refused = run("memory", args)
        assert (refused["ok"], refused["error"]) == (False, error) and "hunter2" not in refused["message"]
    deleted = run("memory", {"op": "replace", "doc": MEM, "old_text": "- buys tea"})
    assert (deleted["content"], deleted["version"]) == ("- likes tea", 2)

    for args, message in (
        ({"op": "read"}, "doc is required"),
        ({"op": "read", "doc": MEM, "text": "x"}, "text does not go with op read"),
        ("{", "the arguments are not JSON"),
        ({"op": "append", "doc": MEM, "x": 1}, "unknown argument: x"),
    ):
        assert run("memory", args) == {"ok": False, "error": "invalid_arguments", "message": message}
    assert run("recall", {"days": 91})["message"] == "days: 1 to 90"
    assert run("memory__recall", {"query": "my password is hunter2!"})["error"] == "sensitive_content"
    with pytest.raises(ValueError, match="owner_id"):
        tools.dispatch("memory", {"op": "read", "doc": MEM}, owner_id="")

    sessions = run("recall", {}, who=SEEDED_OWNER)
    assert sessions["trust"] == "user_data"
    assert [(s["session_id"], s["topic"], s["gist"], s["tasks"]) for s in sessions["sessions"]] == [
        (
            "s-movers",
            "搬家",
            "约了周六的搬家公司",
            [{"task_id": "t-movers", "goal": "book movers", "status": "running"}],
        )
    ]
    found = run("memory__recall", {"query": "花生", "limit": 3}, who=SEEDED_OWNER)
    assert found["ok"] and any(PEANUTS[:4] in m["text"] for m in found["memories"]), found
    assert run("recall", {}, who=owner)["sessions"] == []
    provider.close()


class Untouchable:
    """A backend no argument error may reach."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the backend was called ({name}) for arguments that do not fit")


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("memory", "{not json", "the arguments are not JSON"),
        ("memory", [], "the arguments must be an object"),
        ("memory", {"doc": MEM}, "op is required"),
        ("memory", {"op": "delete", "doc": MEM}, "op must be one of read, append, replace"),
        ("memory", {"op": "read", "doc": MEM, "text": "x"}, "text does not go with op read"),
        ("memory", {"op": "append", "doc": MEM}, "append needs text"),
        ("memory", {"op": "append", "doc": MEM, "text": "   "}, "text must not be empty"),
        ("memory", {"op": "replace", "doc": MEM, "new_text": "y"}, "replace needs old_text"),
        ("memory", {"op": "append", "doc": MEM, "text": "x" * 1001}, "text: at most 1000 characters"),
        ("memory", {"op": "read", "doc": MEM, "owner_id": "someone-else"}, "unknown argument: owner_id"),
        ("recall", {"days": 0}, "days: 1 to 90"),
        ("recall", {"limit": True}, "limit must be an integer"),
        ("memory__recall", {}, "query is required"),
        ("memory__recall", {"query": 42}, "query must be a string"),
        ("forget_everything", {}, "no such tool: forget_everything"),
    ],
)
def test_arguments_are_refused_before_memjobs_is_called(name: str, args: object, message: str) -> None:
    tools = MemoryTools(Untouchable())
    assert tools.dispatch(name, args, owner_id="o") == {"ok": False, "error": "invalid_arguments", "message": message}


def test_a_null_argument_is_one_left_out() -> None:
    from memjobs_client.gateway import check_arguments

    assert check_arguments("memory", {"op": "read", "doc": USER, "text": None}) == {
        "ok": True,
        "value": {"op": "read", "doc": USER},
    }
