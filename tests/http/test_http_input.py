"""What the HTTP API does with input it must not keep or must not accept: secrets
(refused, or redacted before anything is enqueued, and then found nowhere: Redis,
its files, any table, any log), owner ids and request text (in no log and no
metric label), malformed bodies, NUL bytes and lone surrogates."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memjobs_client.contracts import owner_key
from memjobs_worker.embedded import EmbeddedRedis
from memjobs_worker.settings import Settings
from tests.support.http import TS, Api, problem, remember, turn
from tests.support.leaks import redis_keys_holding


@pytest.fixture
def secret() -> tuple[str, str]:
    """A disclosure and its secret value, new in each test: the session's Redis
    files keep what earlier tests wrote, so a fixed secret could be found there."""
    value = f"Pw{uuid.uuid4().hex[:12]}"
    return f"my password is {value}!", value


def found_anywhere(api: Api, redis_server: EmbeddedRedis, needle: str) -> list[str]:
    """Where ``needle`` is still kept: Redis keys, Redis's files, any database table."""
    places = [f"redis key {k!r}" for k in redis_keys_holding(api.harness.runtime.redis, [needle])]
    for path in Path(redis_server.directory).rglob("*"):
        if path.is_file() and needle.encode() in path.read_bytes():
            places.append(f"redis file {path.name}")
    with api.harness.store.engine.connect() as conn:
        tables = [
            r[0] for r in conn.exec_driver_sql("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").all()
        ]
        for table in tables:
            hit = conn.exec_driver_sql(
                f'SELECT count(*) FROM "{table}" t WHERE t::text LIKE %(n)s', {"n": f"%{needle}%"}
            ).scalar()
            if hit:
                places.append(f"table {table}")
    return places


def test_secret_in_a_turn_or_a_task_goal_is_redacted_before_it_is_enqueued(
    api_factory: Callable[..., Api],
    model_settings: Callable[..., Settings],
    redis_server: EmbeddedRedis,
    secret: tuple[str, str],
) -> None:
    disclosure, value = secret
    api = api_factory(worker=False, settings=model_settings(api_port=0, session_digest="on"))
    body = {
        "owner_id": "alice",
        "transcript": [turn(f"ok, {disclosure}"), turn("noted", "assistant")],
        "tasks": [{"task_id": "t1", "goal": f"log in, {disclosure}"}],
    }
    r = api.post("/v1/sessions/s-1/end", body)
    assert r.status_code == 202 and r.json()["status"] == "queued"
    r = api.http.put("/v1/tasks/t1", json={"owner_id": "alice", "goal": f"log in, {disclosure}", "status": "running"})
    assert r.status_code == 202
    assert redis_keys_holding(api.harness.runtime.redis, [b"[REDACTED]"]), "the redacted turn should be queued"
    assert found_anywhere(api, redis_server, value) == []


# -- secrets, logs, metrics --------------------------------------------------------------------


@pytest.mark.parametrize("route", ["remember", "document", "document title"])
@pytest.mark.usefixtures("production_logging")
def test_a_secret_is_refused_as_sensitive_content_and_found_nowhere(
    api_factory: Callable[..., Api],
    redis_server: EmbeddedRedis,
    route: str,
    caplog: pytest.LogCaptureFixture,
    secret: tuple[str, str],
) -> None:
    disclosure, value = secret
    api = api_factory()
    if route == "remember":
        r = api.post("/v1/remember", {"owner_id": "alice", "text": f"note: {disclosure}"})
    else:
        doc = (
            {"doc_id": "d", "title": "Login", "text": f"note: {disclosure}"}
            if route == "document"
            else {"doc_id": "d", "title": f"note: {disclosure}", "text": "harmless"}
        )
        r = api.post("/v1/knowledge/reindex", {"owner_id": "alice", "consent": True, "documents": [doc]})
    body = problem(r, "sensitive_content", 422)
    assert value not in r.text and "credential" in body["detail"]
    api.harness.drain()
    assert found_anywhere(api, redis_server, value) == []
    assert not [rec for rec in server_records(caplog) if value in str(rec.__dict__)]


@pytest.fixture
def production_logging(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """The levels ``configure_logging`` sets in a served process: INFO, mem0 capped at WARNING."""
    caplog.set_level(logging.INFO)
    mem0 = logging.getLogger("mem0")
    before = mem0.level
    mem0.setLevel(logging.WARNING)
    yield
    mem0.setLevel(before)


def server_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Every record but the test's own HTTP client's (which logs the URLs it calls)."""
    return [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]


@pytest.mark.usefixtures("production_logging")
def test_owner_and_text_never_reach_a_log_or_a_metric_label(
    api_factory: Callable[..., Api], caplog: pytest.LogCaptureFixture
) -> None:
    api = api_factory()
    owner, text = "owner-zq9-unique", "the quokka text zq9"
    remember(api, owner, text)
    api.post("/v1/recall", {"owner_id": owner, "query": "quokka"})
    api.get("/v1/sources", owner=owner)
    api.post("/v1/remember", {"owner_id": owner, "text": text, "bogus-zq9": 1})
    api.http.post(
        "/v1/remember",
        content=b'{"owner_id": "owner-zq9-unique", "text": ',
        headers={"content-type": "application/json"},
    )
    api.harness.drain()
    metrics = api.get("/metrics").text
    assert "zq9" not in metrics and owner_key(owner) not in metrics
    # The raw owner id and the text: in no record (workers log the owner's sha256 only).
    assert not [rec for rec in server_records(caplog) if "zq9" in str(rec.__dict__)]
    refusals = [(r.route, r.status) for r in caplog.records if r.name == "memjobs.api"]  # type: ignore[attr-defined]
    assert ("/v1/remember", 422) in refusals and ("/v1/remember", 400) in refusals, refusals
    assert 'memjobs_api_requests_total{method="POST",route="/v1/remember",status="202"} 1.0' in metrics
    assert 'memjobs_api_requests_total{method="POST",route="/v1/remember",status="422"} 1.0' in metrics
    assert 'memjobs_producer_jobs_enqueued_total{actor="remember_source"} 1.0' in metrics
    assert 'memjobs_api_request_duration_seconds_count{route="/v1/recall"} 1.0' in metrics


def test_every_problem_is_rfc9457_and_quotes_no_request_text(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    bad = "needle-xq7"
    cases = [
        (api.post("/v1/remember", {"owner_id": "a", "text": "t", bad: 1}), "validation", 422),
        (api.post("/v1/remember", {"owner_id": "a", "text": 7, "kind": bad}), "validation", 422),
        (
            api.post("/v1/sessions/s/end", {"owner_id": "a", "transcript": [{"role": bad, "text": bad, "ts": bad}]}),
            "validation",
            422,
        ),
        (api.post("/v1/forget", {"owner_id": "a", "source_id": bad}), "validation", 422),
        (
            api.http.post("/v1/remember", content=bad.encode(), headers={"content-type": "application/json"}),
            "malformed_json",
            400,
        ),
        (
            api.http.post("/v1/remember", content=b"[1, 2]", headers={"content-type": "application/json"}),
            "validation",
            422,
        ),
        (
            api.http.post("/v1/remember", content=bad.encode(), headers={"content-type": "text/plain"}),
            "unsupported_media_type",
            415,
        ),
        (api.get(f"/v1/{bad}"), "not_found", 404),
        (api.http.delete("/v1/remember"), "method_not_allowed", 405),
    ]
    for response, reason, status in cases:
        problem(response, reason, status)
        assert bad not in response.text and "Traceback" not in response.text
    assert api.harness.queues()["memjobs_remember"]["ready"] == 0


@pytest.mark.parametrize(
    "raw",
    [
        b'{"owner_id": "a", "text": "nul \\u0000 here"}',
        b'{"owner_id": "a", "text": "lone \\ud800 surrogate"}',
        b'{"owner_id": "a\\udfff", "text": "fine"}',
        b'{"owner_id": "a", "text": "ok", "session_id": "s\\u0000"}',
    ],
)
def test_nul_bytes_and_lone_surrogates_are_refused_and_nothing_is_queued(
    api_factory: Callable[..., Api], raw: bytes
) -> None:
    api = api_factory(worker=False)
    problem(api.http.post("/v1/remember", content=raw, headers={"content-type": "application/json"}), "validation", 422)
    body = b'{"owner_id": "a", "transcript": [{"role": "user", "text": "x\\ud83d", "ts": "%s"}]}' % TS.encode()
    problem(
        api.http.post("/v1/sessions/s/end", content=body, headers={"content-type": "application/json"}),
        "validation",
        422,
    )
    assert all(q["ready"] == 0 for q in api.harness.queues().values())


def test_a_surrogate_pair_is_an_ordinary_character(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    raw = b'{"owner_id": "a", "text": "tea \\ud83c\\udf75 time"}'
    r = api.http.post("/v1/remember", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 202, r.text
