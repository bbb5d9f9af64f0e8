"""The HTTP door against a hostile client: what the data of a request can do
(issue 21, findings 1 and 6). Beside the schemathesis run (test_http_openapi.py),
which sends what the schema allows; these send what an attacker would.

- another owner's source id: a forget is ``not_found`` (404) and changes nothing,
  even while that owner's remember is still queued (finding 1; every door and
  the worker's own path are in tests/memory/test_owner_isolation.py);
- a key in a recall query: refused before any embedding, at the HTTP API, the
  CLI and PersonalMemory alike;
- ids that carry a key (a session, a task, a document): refused, never in
  Redis or PostgreSQL;
- a JSON object naming a key twice: refused (422), nothing queued;
- problem details in the caller's terms: no payload class, no detector rule.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memjobs_client.contracts import owner_key, source_id_for
from memjobs_client.errors import SensitiveContent
from memjobs_worker.cli import exits
from memjobs_worker.settings import Settings
from tests.support.cli import cli_env, run_cli
from tests.support.http import GATEWAY_TOKEN, HOST_TOKEN, Api, problem, remember, turn
from tests.support.leaks import redis_keys_holding, tables_holding
from tests.support.openai_server import FakeOpenAI

#: Keys of the shapes the detector knows (none is a real credential).
AWS_KEY = "AKIAZ5GMHYJ3KT7QWXRE"
GITHUB_TOKEN = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
#: Words that must never be in a problem's detail: payload classes, rule ids.
INTERNAL_NAMES = (
    "RememberSource",
    "ForgetSource",
    "ReindexKnowledge",
    "KnowledgeText",
    "RecordTask",
    "ConsolidateSession",
    "DigestSession",
    "TaskRef",
    "Turn",
    "rule ",
    "aws_access_key",
    "github_token",
    "sk_api_key",
)


def no_internal_names(detail: str) -> None:
    assert not [name for name in INTERNAL_NAMES if name in detail], detail


def send_raw(api: Api, path: str, body: str, token: str | None = None) -> Any:
    headers = {"Content-Type": "application/json", **api.auth(token)}
    return api.http.post(path, content=body.encode(), headers=headers)


# -- finding 1: another owner's source ---------------------------------------------------


def test_a_forget_of_another_owners_queued_source_is_not_found_and_takes_nothing(
    api_factory: Callable[..., Api],
) -> None:
    api = api_factory(worker=False)
    text = "carol's gate code hint is her cat's birthday"
    sid = remember(api, "carol", text)  # queued: no worker yet
    assert sid == source_id_for(owner_key("carol"), text)  # anyone can compute it
    body = problem(api.post("/v1/forget", {"owner_id": "alice", "source_id": sid}), "not_found", 404)
    no_internal_names(body["detail"])
    api.harness.start_worker()
    api.harness.drain()
    carols = api.get("/v1/sources", owner="carol", params={"include_text": "true"}).json()["sources"]
    assert [(s["source_id"], s["state"], s["text"]) for s in carols] == [(sid, "learned", text)]
    assert api.get("/v1/sources", owner="alice").json()["sources"] == []


# -- a key in a recall query --------------------------------------------------------------


@pytest.fixture
def embedding_api(
    api_factory: Callable[..., Api], make_settings: Callable[..., Settings], fake_model: FakeOpenAI
) -> Api:
    """An API whose embeddings come from the recorded model stand-in."""
    return api_factory(
        worker=False,
        settings=make_settings(api_port=0, embedding_base_url=fake_model.base_url, embedding_api_key="test-key"),
    )


def test_a_key_in_a_recall_query_is_refused_before_any_embedding(
    embedding_api: Api, fake_model: FakeOpenAI, tmp_path: Path
) -> None:
    api = embedding_api
    ok = api.post("/v1/recall", {"owner_id": "alice", "query": "what tea do I like"})
    assert ok.status_code == 200, ok.text  # a plain query is embedded: the stand-in sees it
    assert "what tea do I like" in fake_model.all_text_sent()
    query = f"is my key {AWS_KEY} still valid"

    body = problem(api.post("/v1/recall", {"owner_id": "alice", "query": query}), "sensitive_content", 422)
    assert "query" in body["detail"] and AWS_KEY not in json.dumps(body)
    no_internal_names(body["detail"])
    settings = api.harness.settings
    cli = run_cli(
        cli_env(
            tmp_path / "cli",
            MEMJOBS_REDIS_URL=str(settings.redis.url),
            MEMJOBS_DATABASE_URL=str(settings.database.url),
            MEMJOBS_EMBEDDING_BASE_URL=fake_model.base_url,
            MEMJOBS_EMBEDDING_API_KEY="test-key",
        ),
        "recall",
        "--owner",
        "alice",
        "--query",
        query,
    )
    assert cli.code == exits.REFUSED, str(cli)
    assert "--query: refused" in cli.stderr and "AWS access key" in cli.stderr
    assert AWS_KEY not in cli.stdout + cli.stderr and "aws_access_key" not in cli.stderr
    with pytest.raises(SensitiveContent) as refused:
        api.harness.runtime.personal_memory.recall(owner_key("alice"), f"token {GITHUB_TOKEN}", 5)
    assert refused.value.rule == "github_token" and GITHUB_TOKEN not in str(refused.value)

    sent = fake_model.all_text_sent()
    assert AWS_KEY not in sent and GITHUB_TOKEN not in sent


# -- ids that carry a key -----------------------------------------------------------------


def test_ids_that_carry_a_key_are_refused_and_stored_nowhere(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    owner = "alice"
    refusals = {
        "session_id of a remember": api.post(
            "/v1/remember", {"owner_id": owner, "text": "I like oolong", "session_id": AWS_KEY}, GATEWAY_TOKEN
        ),
        "doc_id of a reindex": api.post(
            "/v1/knowledge/reindex",
            {
                "owner_id": owner,
                "consent": True,
                "documents": [{"doc_id": f"notes/{GITHUB_TOKEN}", "title": "notes", "text": "tea notes"}],
            },
            HOST_TOKEN,
        ),
        "task_id of a task report": api.http.put(
            f"/v1/tasks/{AWS_KEY}",
            json={"owner_id": owner, "goal": "buy tea", "status": "running"},
            headers=api.auth(GATEWAY_TOKEN),
        ),
        "task_id in a session's tasks": api.post(
            "/v1/sessions/s-1/end",
            {"owner_id": owner, "transcript": [turn("hello")], "tasks": [{"task_id": GITHUB_TOKEN, "goal": "buy tea"}]},
            GATEWAY_TOKEN,
        ),
        "session id of a memory edit's context": api.post(
            "/v1/memory/edits",
            {
                "owner_id": owner,
                "edits": [{"op": "append", "doc": "USER.md", "text": "likes oolong"}],
                "context": {"session": AWS_KEY},
            },
            GATEWAY_TOKEN,
        ),
        "session id of a session end": api.post(
            f"/v1/sessions/{GITHUB_TOKEN}/end", {"owner_id": owner, "transcript": [turn("hello")]}, GATEWAY_TOKEN
        ),
    }
    for what, response in refusals.items():
        body = problem(response, "sensitive_content", 422)
        assert AWS_KEY not in json.dumps(body) and GITHUB_TOKEN not in json.dumps(body), what
        no_internal_names(body["detail"])
    problem(api.post("/v1/forget", {"owner_id": owner, "source_id": AWS_KEY}, GATEWAY_TOKEN), "validation", 422)
    assert redis_keys_holding(api.harness.runtime.redis, [AWS_KEY, GITHUB_TOKEN]) == []
    assert tables_holding(str(api.harness.settings.database.url), [AWS_KEY, GITHUB_TOKEN]) == []


# -- a key named twice --------------------------------------------------------------------


DUPLICATES = {
    "owner_id twice": (
        "/v1/remember",
        '{"owner_id": "alice", "text": "I like oolong", "owner_id": "carol"}',
        "owner_id",
    ),
    "text twice": ("/v1/remember", '{"owner_id": "alice", "text": "tea", "text": "coffee"}', "text"),
    "in a nested object": (
        "/v1/sessions/s-1/end",
        '{"owner_id": "alice", "transcript": [{"role": "user", "text": "hi", '
        '"ts": "2026-11-30T10:00:00Z", "role": "assistant"}]}',
        "role",
    ),
    "an unknown key": (
        "/v1/remember",
        '{"owner_id": "alice", "text": "tea", "mY-pAsSwOrD": 1, "mY-pAsSwOrD": 2}',
        "a key",
    ),
}


@pytest.mark.parametrize("case", list(DUPLICATES), ids=list(DUPLICATES))
def test_a_json_object_that_names_a_key_twice_is_refused(api_factory: Callable[..., Api], case: str) -> None:
    api = api_factory(worker=False)
    path, raw, named = DUPLICATES[case]
    before = api.harness.queues()
    body = problem(send_raw(api, path, raw), "validation", 422)
    assert body["detail"] == f"body: {named} appears more than once in one object; name each key once"
    assert api.harness.queues() == before, "a refused body queued a job"
    # The same body, each key once, is taken (or, for a key the API does not
    # know, refused for that: the duplicate was the first thing wrong).
    once = send_raw(api, path, json.dumps(json.loads(raw)))
    if named == "a key":
        assert "unknown field" in problem(once, "validation", 422)["detail"]
    else:
        assert once.status_code == 202, once.text


# -- problem details in the caller's terms ---------------------------------------------------


def test_problem_details_name_fields_and_kinds_not_classes_or_rules(
    api_factory: Callable[..., Api], tmp_path: Path
) -> None:
    api = api_factory(worker=False)
    cases = {
        "key in a text": (
            api.post("/v1/remember", {"owner_id": "a", "text": f"my key is {AWS_KEY}"}),
            "sensitive_content",
            ("text", "AWS access key"),
        ),
        "turn not an object": (
            api.post("/v1/sessions/s-1/end", {"owner_id": "a", "transcript": ["hi"]}),
            "validation",
            ("transcript.0", "JSON object"),
        ),
        "goal not text": (
            api.post(
                "/v1/sessions/s-2/end",
                {"owner_id": "a", "transcript": [turn("hi")], "tasks": [{"task_id": "t", "goal": 7}]},
            ),
            "validation",
            ("tasks.0.goal",),
        ),
        "key in a document": (
            api.post(
                "/v1/knowledge/reindex",
                {
                    "owner_id": "a",
                    "consent": True,
                    "documents": [{"doc_id": "d1", "title": "t", "text": f"aws {AWS_KEY}"}],
                },
            ),
            "sensitive_content",
            ("text",),
        ),
    }
    for what, (response, reason, words) in cases.items():
        body = problem(response, reason, 422)
        no_internal_names(body["detail"])
        assert all(w in body["detail"] for w in words), (what, body["detail"])
    settings = api.harness.settings
    cli = run_cli(
        cli_env(
            tmp_path / "cli", MEMJOBS_REDIS_URL=str(settings.redis.url), MEMJOBS_DATABASE_URL=str(settings.database.url)
        ),
        "remember",
        "--owner",
        "a",
        "--text",
        f"my key is {AWS_KEY}",
    )
    assert cli.code == exits.REFUSED and "AWS access key" in cli.stderr, str(cli)
    no_internal_names(cli.stderr)


def test_every_route_with_a_body_parses_it_strictly() -> None:
    """A router added later without ``route_class=JsonRoute`` would take the last
    of two equal keys again: every route of the app that reads a body is a JsonRoute."""
    from fastapi.routing import APIRoute

    from memjobs_worker.endpoints import Endpoints
    from memjobs_worker.http.app import create_app
    from memjobs_worker.http.body import JsonRoute

    def routes(found: list[Any]) -> Iterator[APIRoute]:
        for route in found:
            if isinstance(route, APIRoute):
                yield route
            # An included router (FastAPI keeps it whole) or a mount: its own routes.
            inner = getattr(getattr(route, "original_router", route), "routes", None)
            if inner is not None and inner is not found:
                yield from routes(inner)

    app = create_app(Settings(), Endpoints("redis://127.0.0.1:1/0", "postgresql://nobody@127.0.0.1:1/none"))
    try:
        with_body = [r for r in routes(app.routes) if r.body_field is not None]
        assert len(with_body) >= 6
        assert [r.path for r in with_body if not isinstance(r, JsonRoute)] == []
    finally:
        app.state.ctx.close()


def test_the_strict_parser_refuses_a_repeated_key_at_any_depth() -> None:
    from memjobs_worker.http.body import DuplicateKey, loads

    assert loads('{"a": [{"b": 1, "c": {"d": 2}}], "e": {}}') == {"a": [{"b": 1, "c": {"d": 2}}], "e": {}}
    for raw, key in (('{"a": 1, "a": 1}', "a"), ('[{"x": {"y": 1, "y": 2}}]', "y")):
        with pytest.raises(DuplicateKey) as refused:
            loads(raw)
        assert refused.value.key == key
