"""Knowledge over MCP (issue 23), driven by the official SDK's own client: the
front profile over stdio (``memjobs mcp`` as a subprocess: exactly ``recall``),
the agent profile over streamable HTTP at ``/mcp`` on the API (``recall`` and
``get_chunk``, loopback, host token and owner header); what leaves (trust
label, no private path, bounded sizes), what is refused (a keyed query before
any embedding call, another owner's chunk, a stale chunk, a missing or wrong
token), and knowledge off: no server at either door."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from memjobs_worker.cli import exits
from memjobs_worker.mcp_server.answers import MAX_RECALL_BYTES, SNIPPET_CHARS
from memjobs_worker.settings import Settings
from tests.support.cli import run_cli
from tests.support.harness import REPO, Harness, worker_env
from tests.support.http import GATEWAY_TOKEN, HOST_TOKEN, Api
from tests.support.openai_server import FakeOpenAI

T = TypeVar("T")

OWNER = "mcp-owner@example.com"
OTHER = "mcp-other@example.com"
KEYED_QUERY = "which note mentions sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
PRIVATE_DIR = "private-folder-7f3a"
TEA = "Oolong tea is brewed with water at ninety-five degrees, for three minutes."
BIKE = "Lubricate the bike chain every two weeks, and wipe it after rain."
SECRET_PLAN = "The other owner's surprise party is on the fourteenth, at the lake house."


@pytest.fixture
def settings(make_settings: Callable[..., Settings], fake_model: FakeOpenAI, tmp_path: Path) -> Settings:
    return make_settings(
        memory_provider="off",
        embedding_base_url=fake_model.base_url,
        embedding_api_key="k",
        embedding_dims=64,
        knowledge_roots=str(tmp_path),
        api_port=0,
        api_host_token=HOST_TOKEN,
        api_gateway_token=GATEWAY_TOKEN,
    )


def index_owner_notes(h: Harness, tmp_path: Path) -> Path:
    """OWNER's corpus: two files in a folder whose name must never leave; OTHER's: one note."""
    folder = tmp_path / PRIVATE_DIR
    folder.mkdir(exist_ok=True)
    (folder / "tea.md").write_text(f"# Tea\n\n{TEA}\n", encoding="utf-8")
    (folder / "bike.md").write_text(f"# Bike\n\n{BIKE}\n", encoding="utf-8")
    h.client.reindex_knowledge(
        OWNER, [str(folder / "tea.md"), str(folder / "bike.md")], consent=True, allowed_roots=[str(tmp_path)]
    )
    h.client.reindex_knowledge(OTHER, [{"doc_id": "party", "title": "Party", "text": SECRET_PLAN}], consent=True)
    h.drain()
    return folder


def run(fn: Callable[[], Awaitable[T]]) -> T:
    return anyio.run(fn)


def answer(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    found: dict[str, Any] = result.structured_content
    return found


def error_text(result: CallToolResult) -> str:
    """A refusal's text without the SDK's prefix ("Error executing tool recall: ")."""
    assert result.is_error, result
    text = " ".join(getattr(block, "text", "") for block in result.content)
    return re.sub(r"^Error executing tool \w+: ", "", text)


# --- stdio: the front profile -------------------------------------------------------------


def stdio_client_for(settings: Settings, owner: str, errlog: Any) -> Client:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memjobs_worker.cli.main", "mcp", "--owner", owner],
        env=worker_env(settings),
        cwd=REPO,
    )
    return Client(stdio_client(params, errlog=errlog))


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[Any]:
    with open(tmp_path / "mcp-stderr.log", "w+") as log:
        yield log


def test_stdio_offers_exactly_recall_and_recalls_the_owners_note_untrusted_without_a_path(
    settings: Settings,
    harness_factory: Callable[[Settings], Harness],
    tmp_path: Path,
    fake_model: FakeOpenAI,
    errlog: Any,
) -> None:
    h = harness_factory(settings)
    h.start_worker()
    index_owner_notes(h, tmp_path)

    async def session() -> tuple[list[str], dict[str, Any], CallToolResult, int, int]:
        async with stdio_client_for(settings, OWNER, errlog) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            found = answer(
                await client.call_tool("recall", {"query": "how hot should the water be for oolong tea", "k": 3})
            )
            before = len(fake_model.requests_for("embeddings"))
            keyed = await client.call_tool("recall", {"query": KEYED_QUERY})
            return tools, found, keyed, before, len(fake_model.requests_for("embeddings"))

    tools, found, keyed, before, after = run(session)
    assert tools == ["recall"]
    assert found["mode"] == "hybrid" and found["trust"] == "untrusted_external"
    top = found["results"][0]
    assert TEA[:40] in top["snippet"] and top["title"] and top["chunk_id"] and top["score"] > 0
    assert {r["trust"] for r in found["results"]} == {"untrusted_external"}
    shown = json.dumps(found)
    assert PRIVATE_DIR not in shown and str(tmp_path) not in shown
    assert SECRET_PLAN[:20] not in shown  # another owner's note never answers
    text = error_text(keyed)
    assert text.startswith("sensitive_content:") and "sk-proj" not in text
    assert after == before and "sk-proj" not in fake_model.all_text_sent()


def test_stdio_refuses_an_out_of_range_k_by_the_sdks_schema(
    settings: Settings,
    harness_factory: Callable[[Settings], Harness],
    errlog: Any,
) -> None:
    harness_factory(settings)

    async def session() -> tuple[dict[str, Any], CallToolResult, CallToolResult]:
        async with stdio_client_for(settings, OWNER, errlog) as client:
            [tool] = (await client.list_tools()).tools
            return (
                tool.input_schema,
                await client.call_tool("recall", {"query": "tea", "k": 500}),
                await client.call_tool("recall", {"k": 2}),
            )

    schema, big_k, no_query = run(session)
    assert schema["properties"]["k"]["maximum"] == 10 and schema["required"] == ["query"]
    assert big_k.is_error and no_query.is_error


def test_knowledge_off_means_memjobs_mcp_refuses_to_start_as_the_other_knowledge_commands(
    settings: Settings,
    tmp_path: Path,
) -> None:
    env = worker_env(settings, MEMJOBS_KNOWLEDGE="off")
    results = [
        run_cli(env, "mcp", "--owner", OWNER),
        run_cli(env, "knowledge", "search", "--owner", OWNER, "--query", "tea"),
    ]
    assert {(r.code, r.stderr) for r in results} == {
        (exits.CONFIG, "memjobs: knowledge is off (MEMJOBS_KNOWLEDGE=off)\n")
    }, [str(r) for r in results]


# --- streamable HTTP: the agent profile ---------------------------------------------------


@asynccontextmanager
async def http_client_for(api: Api, owner: str, token: str = HOST_TOKEN) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}", "X-Memjobs-Owner": quote(owner, safe="")}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(f"{api.url}/mcp", http_client=http)) as client,
    ):
        yield client


def rpc(api: Api, headers: dict[str, str]) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    return api.http.post(
        "/mcp",
        json=body,
        headers={"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25", **headers},
    )


def test_http_offers_recall_and_get_chunk_for_the_owner_the_header_names(
    settings: Settings,
    api_factory: Callable[..., Api],
    tmp_path: Path,
) -> None:
    api = api_factory(settings=settings)
    index_owner_notes(api.harness, tmp_path)

    async def session() -> tuple[list[str], dict[str, Any], dict[str, Any]]:
        async with http_client_for(api, OWNER) as client:
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            found = answer(await client.call_tool("recall", {"query": "bike chain", "k": 2}))
            chunk = answer(await client.call_tool("get_chunk", {"chunk_id": found["results"][0]["chunk_id"]}))
            return tools, found, chunk

    tools, found, chunk = run(session)
    assert tools == ["get_chunk", "recall"]
    top = found["results"][0]
    assert BIKE[:30] in top["snippet"] and top["trust"] == "untrusted_external"
    assert BIKE in chunk["text"] and chunk["trust"] == "untrusted_external"
    citation = chunk["citation"]
    assert citation["chunk_id"] == top["chunk_id"] and citation["title"] == top["title"]
    assert citation["source"].startswith("file:") and len(json.dumps(citation)) < 1200
    shown = json.dumps([found, chunk])
    assert PRIVATE_DIR not in shown and str(tmp_path) not in shown


def test_get_chunk_refuses_another_owners_chunk_and_a_changed_one(
    settings: Settings,
    api_factory: Callable[..., Api],
    tmp_path: Path,
) -> None:
    api = api_factory(settings=settings)
    folder = index_owner_notes(api.harness, tmp_path)

    async def cited(owner: str, query: str) -> str:
        async with http_client_for(api, owner) as client:
            found = answer(await client.call_tool("recall", {"query": query, "k": 1}))
            return str(found["results"][0]["chunk_id"])

    async def get(owner: str, chunk_id: str) -> CallToolResult:
        async with http_client_for(api, owner) as client:
            return await client.call_tool("get_chunk", {"chunk_id": chunk_id})

    theirs = run(lambda: cited(OTHER, "surprise party"))
    refused = run(lambda: get(OWNER, theirs))
    assert error_text(refused).startswith("not_found:") and "lake house" not in error_text(refused)
    assert run(lambda: get(OTHER, theirs)).is_error is False  # the id itself is good: for its owner

    mine = run(lambda: cited(OWNER, "oolong tea"))
    (folder / "tea.md").write_text("# Tea\n\nGreen tea wants cooler water, about eighty degrees.\n")
    api.harness.client.reindex_knowledge(
        OWNER, [str(folder / "tea.md"), str(folder / "bike.md")], consent=True, allowed_roots=[str(tmp_path)]
    )
    api.harness.drain()
    assert error_text(run(lambda: get(OWNER, mine))).startswith("stale:")
    api.harness.client.reindex_knowledge(OWNER, [str(folder / "bike.md")], consent=True, allowed_roots=[str(tmp_path)])
    api.harness.drain()
    assert error_text(run(lambda: get(OWNER, mine))).startswith("not_found:")
    assert error_text(run(lambda: get(OWNER, "made-up#0@0123456789abcdef"))).startswith("not_found:")


def test_http_recall_refuses_a_keyed_query_before_any_embedding_call_and_bounds_its_answer(
    settings: Settings,
    api_factory: Callable[..., Api],
    fake_model: FakeOpenAI,
) -> None:
    api = api_factory(settings=settings)
    long_note = "Tea notes. " + "oolong water temperature and steeping time. " * 400
    api.harness.client.reindex_knowledge(
        OWNER, [{"doc_id": f"n{i}", "title": "T" * 290, "text": long_note} for i in range(12)], consent=True
    )
    api.harness.drain()

    async def session() -> tuple[CallToolResult, int, int, dict[str, Any]]:
        async with http_client_for(api, OWNER) as client:
            before = len(fake_model.requests_for("embeddings"))
            keyed = await client.call_tool("recall", {"query": KEYED_QUERY})
            after = len(fake_model.requests_for("embeddings"))
            found = answer(await client.call_tool("recall", {"query": "oolong water temperature", "k": 10}))
            return keyed, before, after, found

    keyed, before, after, found = run(session)
    assert error_text(keyed).startswith("sensitive_content:") and "sk-proj" not in error_text(keyed)
    assert after == before and "sk-proj" not in fake_model.all_text_sent()
    assert 1 <= len(found["results"]) <= 10
    assert all(len(r["snippet"]) <= SNIPPET_CHARS and len(r["title"]) <= 160 for r in found["results"])
    assert len(json.dumps(found["results"], ensure_ascii=False).encode()) <= MAX_RECALL_BYTES + 200


def test_http_mcp_needs_the_host_token_an_owner_and_refuses_the_rest(
    settings: Settings,
    api_factory: Callable[..., Api],
) -> None:
    api = api_factory(settings=settings)
    owner = {"X-Memjobs-Owner": quote(OWNER, safe="")}
    assert rpc(api, owner).status_code == 401
    assert rpc(api, {**owner, "Authorization": "Bearer not-the-token-0123456789"}).status_code == 401
    assert rpc(api, {**owner, "Authorization": f"Bearer {GATEWAY_TOKEN}"}).status_code == 403
    assert rpc(api, {"Authorization": f"Bearer {HOST_TOKEN}"}).status_code == 422
    assert rpc(api, {**owner, "Authorization": f"Bearer {HOST_TOKEN}"}).status_code == 200

    async def listed(token: str) -> list[str]:
        async with http_client_for(api, OWNER, token) as client:
            return [t.name for t in (await client.list_tools()).tools]

    for token in ("wrong-token-0123456789abcdef", GATEWAY_TOKEN):
        with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK's client gives up on a refused connection
            run(partial(listed, token))
    assert "/mcp" not in api.http.get("/openapi.json").json()["paths"]


def test_knowledge_off_or_no_host_token_means_no_mcp_endpoint(
    make_settings: Callable[..., Settings],
    api_factory: Callable[..., Api],
) -> None:
    off = api_factory(
        worker=False,
        settings=make_settings(memory_provider="off", knowledge="off", api_port=0, api_host_token=HOST_TOKEN),
    )
    open_api = api_factory(worker=False, settings=make_settings(memory_provider="off", api_port=0))
    for api in (off, open_api):
        answered = rpc(api, {"X-Memjobs-Owner": OWNER, "Authorization": f"Bearer {HOST_TOKEN}"})
        assert answered.status_code == 404, answered.text
