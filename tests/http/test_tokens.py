"""Scoped tokens over real HTTP: a token acts only for its owners and its scopes
(403 otherwise), an expired or badly signed one is 401, two keys verify during
a rotation, and ``memjobs token issue`` prints one that works."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import jwt
import pytest

from memjobs_client.errors import ConfigurationError
from memjobs_worker.cli.main import main as cli_main
from memjobs_worker.http.scoped_tokens import AUDIENCE, ISSUER, InvalidToken, ScopedKeys, issue
from memjobs_worker.settings import ApiSettings, Settings
from tests.support.harness import REPO
from tests.support.http import GATEWAY_TOKEN, HOST_TOKEN, Api, problem

KEY = "scoped-key-0123456789abcdef-0123456789"
OLD_KEY = "scoped-key-before-rotation-0123456789ab"
OTHER_KEY = "a-key-this-server-never-had-0123456789"


def token(key: str = KEY, **kw: Any) -> str:
    values: dict[str, Any] = {"scopes": ["read", "write"], "owners": ["alice"]}
    values.update(kw)
    # A raw key, as from the environment: pydantic validates it into a SecretStr.
    return issue(ApiSettings(token_key=key), **values)  # type: ignore[arg-type]


@pytest.fixture
def scoped(api_factory: Callable[..., Api]) -> Api:
    return api_factory(
        worker=False,
        api_token_key=KEY,
        api_token_previous_key=OLD_KEY,
        api_gateway_token=GATEWAY_TOKEN,
        api_host_token=HOST_TOKEN,
    )


def test_a_token_acts_for_its_owner_and_not_for_another(scoped: Api) -> None:
    alice = token()
    assert scoped.post("/v1/remember", {"owner_id": "alice", "text": "green tea"}, token=alice).status_code == 202
    assert scoped.get("/v1/sources", owner="alice", token=alice).status_code == 200
    assert scoped.post("/v1/recall", {"owner_id": "alice", "query": "tea"}, token=alice).status_code == 200
    for r in (
        scoped.post("/v1/remember", {"owner_id": "bob", "text": "green tea"}, token=alice),
        scoped.get("/v1/sources", owner="bob", token=alice),
        scoped.get("/v1/memories", owner="alice2", token=alice),
        scoped.post("/v1/recall", {"owner_id": "bob", "query": "tea"}, token=alice),
    ):
        body = problem(r, "forbidden", 403)
        assert "owner" in body["detail"] and "bob" not in body["detail"]
    assert scoped.harness.queues()["memjobs_remember"]["ready"] == 1


def test_a_token_acts_only_within_its_scopes(scoped: Api) -> None:
    reader = token(scopes=["read"])
    assert scoped.get("/v1/sources", owner="alice", token=reader).status_code == 200
    for r, scope in (
        (scoped.post("/v1/remember", {"owner_id": "alice", "text": "tea"}, token=reader), "write"),
        (scoped.post("/v1/forget", {"owner_id": "alice", "source_id": "s" * 64}, token=reader), "forget"),
        (scoped.get("/v1/sessions", owner="alice", token=reader), "session"),
        (scoped.post("/v1/knowledge/search", {"owner_id": "alice", "query": "tea"}, token=reader), "knowledge"),
        (scoped.get("/v1/ops/dead-letters", token=reader), "admin"),
    ):
        assert scope in problem(r, "forbidden", 403)["detail"]
    assert scoped.harness.queues()["memjobs_remember"]["ready"] == 0


def test_a_scope_refusal_comes_before_the_body_is_parsed(scoped: Api) -> None:
    reader = token(scopes=["read"])
    r = scoped.http.post(
        "/v1/remember",
        content=b"{bad",
        headers={"content-type": "application/json", "Authorization": f"Bearer {reader}"},
    )
    problem(r, "forbidden", 403)


def test_an_owner_prefix_is_a_tenant(scoped: Api) -> None:
    tenant = token(owners=(), owner_prefix="acme:", scopes=["read"])
    assert scoped.get("/v1/sources", owner="acme:alice", token=tenant).status_code == 200
    assert scoped.get("/v1/sources", owner="acme:bob", token=tenant).status_code == 200
    problem(scoped.get("/v1/sources", owner="acmex:alice", token=tenant), "forbidden", 403)
    problem(scoped.get("/v1/sources", owner="alice", token=tenant), "forbidden", 403)


def test_admin_routes_across_owners_need_every_owner(scoped: Api) -> None:
    limited_admin = token(scopes=["admin"])
    problem(scoped.get("/v1/ops/dead-letters", token=limited_admin), "forbidden", 403)
    operator = token(scopes=["admin"], owners=(), all_owners=True)
    assert scoped.get("/v1/ops/dead-letters", token=operator).status_code == 200
    reindex = {
        "owner_id": "bob",
        "consent": True,
        "documents": [{"doc_id": "d1", "title": "Tea", "text": "Oolong is half oxidised."}],
    }
    problem(scoped.post("/v1/knowledge/reindex", reindex, token=limited_admin), "forbidden", 403)
    assert scoped.post("/v1/knowledge/reindex", reindex, token=operator).status_code == 202


def test_expired_or_foreign_tokens_are_401(scoped: Api) -> None:
    now = time.time()
    expired = token(ttl_s=60, now=now - 3600)
    foreign = token(key=OTHER_KEY)
    tampered = token()[:-4] + "AAAA"
    unsigned = jwt.encode(
        {"iss": ISSUER, "aud": AUDIENCE, "iat": int(now), "exp": int(now) + 60, "scope": "read", "all_owners": True},
        key="",
        algorithm="none",
    )
    for bad, words in ((expired, "expired"), (foreign, "signature"), (tampered, "signature"), (unsigned, "malformed")):
        r = scoped.get("/v1/sources", owner="alice", token=bad)
        assert words in problem(r, "unauthorized", 401)["detail"]
        assert r.headers["www-authenticate"] == 'Bearer error="invalid_token"'


def test_both_keys_verify_during_a_rotation(scoped: Api) -> None:
    for key in (KEY, OLD_KEY):
        assert scoped.get("/v1/sources", owner="alice", token=token(key=key)).status_code == 200


def test_the_static_tokens_still_work_beside_scoped_ones(scoped: Api) -> None:
    assert scoped.get("/v1/sources", owner="bob", token=GATEWAY_TOKEN).status_code == 200
    assert scoped.get("/v1/ops/dead-letters", token=HOST_TOKEN).status_code == 200
    problem(scoped.get("/v1/ops/dead-letters", token=GATEWAY_TOKEN), "forbidden", 403)


def test_scoped_tokens_alone_close_the_door(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, api_token_key=KEY)
    problem(api.get("/v1/sources", owner="alice"), "unauthorized", 401)
    assert api.get("/v1/sources", owner="alice", token=token()).status_code == 200


def test_issue_refuses_what_cannot_be_meant() -> None:
    settings = ApiSettings(token_key=KEY)  # type: ignore[arg-type]  # as in token() above
    for kw, words in (
        ({"scopes": ["read"], "owners": ["a"], "all_owners": True}, "not both"),
        ({"scopes": ["read"]}, "name the owners"),
        ({"scopes": ["root"], "owners": ["a"]}, "scopes must be"),
        ({"scopes": ["read"], "owners": ["a"], "ttl_s": 0}, "lifetime"),
    ):
        with pytest.raises(ConfigurationError, match=words):
            issue(settings, **kw)
    with pytest.raises(ConfigurationError, match="MEMJOBS_API_TOKEN_KEY"):
        issue(ApiSettings(), scopes=["read"], owners=["a"])
    with pytest.raises(InvalidToken):
        ScopedKeys(ApiSettings()).verify(token())


def test_memjobs_token_issue_prints_a_token_that_works(
    scoped: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MEMJOBS_API_TOKEN_KEY", KEY)
    assert (
        cli_main(
            ["token", "issue", "--scope", "read,session", "--owner", "alice", "--ttl", "15m", "--subject", "gateway-eu"]
        )
        == 0
    )
    out, err = capsys.readouterr()
    printed = out.strip()
    assert "\n" not in printed and "scopes read session" in err and KEY not in out + err
    claims = jwt.decode(printed, KEY, algorithms=["HS256"], audience=AUDIENCE)
    assert claims["exp"] - claims["iat"] == 900 and claims["sub"] == "gateway-eu"
    assert scoped.get("/v1/sessions", owner="alice", token=printed).status_code == 200
    problem(scoped.get("/v1/sessions", owner="bob", token=printed), "forbidden", 403)
    monkeypatch.setenv("MEMJOBS_API_TOKEN_PREVIOUS_KEY", OLD_KEY)
    assert cli_main(["config", "--json"]) == 0
    shown = capsys.readouterr().out
    assert KEY not in shown and OLD_KEY not in shown and '"api.token_key": "[REDACTED]"' in shown
    monkeypatch.delenv("MEMJOBS_API_TOKEN_KEY")
    monkeypatch.delenv("MEMJOBS_API_TOKEN_PREVIOUS_KEY")
    assert cli_main(["token", "issue", "--scope", "read", "--owner", "alice"]) == 3
    assert "MEMJOBS_API_TOKEN_KEY" in capsys.readouterr().err


#: The scope of each /v1 route, as docs/security.md lists them: a route added or
#: changed must change this table too (its scope is deliberate).
EXPECTED_NEEDS = {
    ("DELETE", "/v1/owners"): ("admin", False),
    ("GET", "/v1/owners/export"): ("admin", False),
    ("POST", "/v1/remember"): ("write", True),
    ("POST", "/v1/forget"): ("forget", True),
    ("POST", "/v1/recall"): ("read", True),
    ("GET", "/v1/preferences"): ("read", True),
    ("GET", "/v1/sources"): ("read", True),
    ("GET", "/v1/memories"): ("read", True),
    ("GET", "/v1/memory/documents"): ("read", True),
    ("GET", "/v1/memory/documents/{doc}"): ("read", True),
    ("POST", "/v1/memory/edits"): ("write", True),
    ("POST", "/v1/sessions/{session_id}/end"): ("session", True),
    ("GET", "/v1/sessions"): ("session", True),
    ("PUT", "/v1/tasks/{task_id}"): ("session", True),
    ("POST", "/v1/sessions/{session_id}/blackboard"): ("session", True),
    ("GET", "/v1/sessions/{session_id}/blackboard"): ("session", True),
    ("POST", "/v1/knowledge/search"): ("knowledge", True),
    ("POST", "/v1/knowledge/reindex"): ("admin", True),
}


def test_every_v1_route_declares_one_deliberate_scope() -> None:
    from fastapi.routing import APIRoute

    from memjobs_worker.endpoints import Endpoints
    from memjobs_worker.http.app import create_app
    from memjobs_worker.http.body import JsonRoute, declared_need

    def leaves(routes: list[Any]) -> Iterator[Any]:  # included routers walked into
        for route in routes:
            inner = getattr(getattr(route, "original_router", None), "routes", None)
            yield from leaves(list(inner)) if inner is not None else [route]

    app = create_app(Settings(), Endpoints("redis://127.0.0.1:1/0", "postgresql://u@127.0.0.1:1/d"))
    routes = [r for r in leaves(app.router.routes) if isinstance(r, APIRoute) and r.path_format.startswith("/v1/")]
    assert routes
    found = {}
    for route in routes:
        assert isinstance(route, JsonRoute), route.path_format  # the class that runs the check
        need = declared_need(route)
        assert need is not None, f"{route.path_format} declares no scope: needs(...)"
        assert route.methods is not None  # an APIRoute's methods are always set
        for method in route.methods:
            if route.path_format.startswith("/v1/ops/"):
                assert (need.scope, need.per_owner) == ("admin", False), route.path_format
            else:
                found[(method, route.path_format)] = (need.scope, need.per_owner)
    assert found == EXPECTED_NEEDS


@pytest.mark.skipif(
    shutil.which("node") is None,
    reason="node is not installed: the TypeScript client's scoped-token test needs Node.js 20+",
)
def test_the_typescript_client_sends_a_scoped_token(scoped: Api) -> None:
    env = {
        **os.environ,
        "MEMJOBS_API_URL": scoped.url,
        "MEMJOBS_SCOPED_OWNER": "ts-scoped",
        "MEMJOBS_SCOPED_TOKEN": token(owners=["ts-scoped"]),
        "MEMJOBS_READ_TOKEN": token(owners=["ts-scoped"], scopes=["read"]),
    }
    done = subprocess.run(
        [str(shutil.which("node")), "--test", "test/scoped.test.mjs"],
        cwd=REPO / "clients" / "typescript",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "# pass 1" in done.stdout and "# skipped 0" in done.stdout, done.stdout[-2000:]
    assert scoped.harness.queues()["memjobs_remember"]["ready"] == 1


def test_mcp_takes_a_scoped_token_with_knowledge_for_its_owner_only(
    make_settings: Callable[..., Settings], api_factory: Callable[..., Api]
) -> None:
    api = api_factory(
        worker=False, settings=make_settings(memory_provider="off", knowledge="on", api_port=0, api_token_key=KEY)
    )

    def tools_list(token: str, owner: str) -> Any:
        return api.http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2025-11-25",
                "X-Memjobs-Owner": owner,
                "Authorization": f"Bearer {token}",
            },
        )

    agent = token(scopes=["knowledge"])
    listed = tools_list(agent, "alice")
    assert listed.status_code == 200, listed.text
    assert {t["name"] for t in listed.json()["result"]["tools"]} == {"recall", "get_chunk"}
    problem(tools_list(agent, "bob"), "forbidden", 403)
    problem(tools_list(token(scopes=["read"]), "alice"), "forbidden", 403)
    problem(tools_list(token(key=OTHER_KEY, scopes=["knowledge"]), "alice"), "unauthorized", 401)
