"""Every route of the HTTP API over real HTTP (uvicorn on a loopback port) against
the test session's Redis and PostgreSQL, with an in-process worker behind it."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from datetime import UTC, datetime

from memjobs_client.contracts import RememberSource, TaskRef, owner_key, source_id_for
from memjobs_worker.model_breaker import Ticket
from memjobs_worker.settings import Settings
from tests.support.http import Api, problem, remember, turn
from tests.support.polling import wait_for

# -- personal memory -----------------------------------------------------------------------


def test_remember_is_learned_and_recalled_with_its_source_id(api_factory: Callable[..., Api]) -> None:
    api = api_factory()
    source_id = remember(api, "alice", "I drink green tea every morning")
    api.harness.drain()
    r = api.post("/v1/recall", {"owner_id": "alice", "query": "green tea", "limit": 3})
    assert r.status_code == 200, r.text
    hits = r.json()["memories"]
    assert [h["source_ids"] for h in hits] == [[source_id]]
    assert hits[0]["text"] == "I drink green tea every morning" and hits[0]["score"] > 0


def test_the_same_words_give_the_same_source_id(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    assert remember(api, "alice", "我对花生过敏") == remember(api, "alice", "我对花生过敏")
    assert remember(api, "alice", "我对花生过敏") != remember(api, "bob", "我对花生过敏")


def test_forget_hides_the_source_at_once_and_purges_its_memories(api_factory: Callable[..., Api]) -> None:
    api = api_factory()
    source_id = remember(api, "alice", "I drink green tea every morning")
    api.harness.drain()
    api.harness.stop_worker()  # the purge stays queued: recall must not wait for it
    r = api.post("/v1/forget", {"owner_id": "alice", "source_id": source_id})
    assert r.status_code == 202 and r.json() == {"source_id": source_id, "status": "forgotten", "purge": "queued"}
    assert api.post("/v1/recall", {"owner_id": "alice", "query": "green tea"}).json()["memories"] == []
    assert api.get("/v1/memories", owner="alice").json()["memories"] == []
    api.harness.start_worker()
    api.harness.drain()
    states = {s["source_id"]: s["state"] for s in api.get("/v1/sources", owner="alice").json()["sources"]}
    assert states == {source_id: "forgotten"}
    assert api.harness.pipeline.engine.list(owner_key("alice")) == []
    again = api.post("/v1/forget", {"owner_id": "alice", "source_id": source_id})
    assert again.status_code == 202 and again.json()["status"] == "already_forgotten"


def test_forget_of_another_owners_source_is_not_found_and_changes_nothing(api_factory: Callable[..., Api]) -> None:
    api = api_factory()
    source_id = remember(api, "alice", "I drink green tea every morning")
    api.harness.drain()
    # Mallory does not have it: not_found, as the CLI and the producer client say.
    problem(api.post("/v1/forget", {"owner_id": "mallory", "source_id": source_id}), "not_found", 404)
    api.harness.drain()
    assert [
        h["source_ids"] for h in api.post("/v1/recall", {"owner_id": "alice", "query": "green tea"}).json()["memories"]
    ] == [[source_id]]


def test_reads_carry_only_the_named_owners_data(api_factory: Callable[..., Api]) -> None:
    api = api_factory()
    mine = remember(api, "alice", "alice likes oolong tea")
    remember(api, "bob", "bob likes oolong tea")
    api.harness.drain()
    sources = api.get("/v1/sources", owner="alice", params={"include_text": "true"}).json()["sources"]
    assert [(s["source_id"], s["text"], s["state"]) for s in sources] == [(mine, "alice likes oolong tea", "learned")]
    assert api.get("/v1/sources", owner="alice").json()["sources"][0]["text"] is None
    memories = api.get("/v1/memories", owner="alice").json()["memories"]
    assert [m["text"] for m in memories] == ["alice likes oolong tea"]
    recalled = api.post("/v1/recall", {"owner_id": "alice", "query": "oolong tea", "limit": 10}).json()
    assert [m["source_ids"] for m in recalled["memories"]] == [[mine]]


def test_a_failed_source_is_listed_with_its_reason(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    key = owner_key("alice")
    store = api.harness.store
    source_id = source_id_for(key, "I moved to Hangzhou")
    store.add_source(
        RememberSource(owner_key=key, source_id=source_id, text="I moved to Hangzhou"), sent_at=datetime.now(UTC)
    )
    attempt = store.begin_attempt(key, 1, 10)
    assert attempt is not None
    reason = "model_output_invalid: the reply is not JSON (after 2 attempts)"
    store.fail_attempt(attempt, reason)  # as the pipeline does after two malformed replies
    [listed] = api.get("/v1/sources", owner="alice").json()["sources"]
    assert (listed["source_id"], listed["state"], listed["reason"], listed["learned_at"]) == (
        source_id,
        "failed",
        reason,
        None,
    )


def test_an_owner_id_that_is_not_ascii_works_percent_encoded(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    source_id = remember(api, "用户-张三", "我喜欢喝绿茶")
    r = api.get("/v1/sources", owner="用户-张三")  # the helper percent-encodes
    assert r.status_code == 200
    # Not yet written by a worker (none runs): the ledger is empty, but the read is the owner's.
    assert r.json()["sources"] == [] and source_id.startswith("src_")
    problem(api.http.get("/v1/sources", headers={"X-Memjobs-Owner": "%ff%fe"}), "validation", 422)
    problem(api.http.get("/v1/sources"), "validation", 422)


def test_listings_are_capped_and_say_so(api_factory: Callable[..., Api]) -> None:
    api = api_factory(api_max_listing=3)
    for i in range(5):
        remember(api, "alice", f"fact number {i} about tea")
    api.harness.drain()
    page = api.get("/v1/sources", owner="alice", params={"limit": 100}).json()
    assert len(page["sources"]) == 3 and page["truncated"] is True
    page = api.get("/v1/memories", owner="alice", params={"limit": 2}).json()
    assert len(page["memories"]) == 2 and page["truncated"] is True
    problem(api.get("/v1/sources", owner="alice", params={"limit": 0}), "validation", 422)
    problem(api.post("/v1/recall", {"owner_id": "alice", "query": "tea", "limit": 51}), "validation", 422)


def test_preferences_read_user_md_and_its_version(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    assert api.get("/v1/preferences", owner="alice").json() == {"doc": "USER.md", "version": 0, "content": ""}
    api.harness.runtime.memory_docs.append("alice", "USER.md", "- prefers short answers")
    doc = api.get("/v1/preferences", owner="alice").json()
    assert doc["version"] == 1 and "prefers short answers" in doc["content"]
    assert api.get("/v1/preferences", owner="bob").json()["content"] == ""


def test_memory_off_refuses_the_memory_routes(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, memory_provider="off")
    problem(api.post("/v1/remember", {"owner_id": "a", "text": "hello there"}), "memory_off", 409)
    problem(api.post("/v1/recall", {"owner_id": "a", "query": "hello"}), "memory_off", 409)
    problem(api.post("/v1/forget", {"owner_id": "a", "source_id": "src_" + "0" * 32}), "memory_off", 409)
    assert api.harness.queues()["memjobs_remember"]["ready"] == 0


# -- sessions ----------------------------------------------------------------------------


def test_session_ended_twice_concurrently_is_one_set_of_jobs(
    api_factory: Callable[..., Api], model_settings: Callable[..., Settings]
) -> None:
    api = api_factory(worker=False, settings=model_settings(api_port=0, session_digest="on"))
    body = {
        "owner_id": "alice",
        "transcript": [turn("let's plan the trip"), turn("sure", "assistant")],
        "tasks": [{"task_id": "t1", "goal": "book the hotel"}],
    }
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda _: api.post("/v1/sessions/s-42/end", body), range(8)))
    assert all(r.status_code == 202 for r in replies), [r.text for r in replies]
    statuses = sorted(r.json()["status"] for r in replies)
    assert statuses == ["already_ended"] * 7 + ["queued"]
    first = next(r.json() for r in replies if r.json()["status"] == "queued")
    assert sorted(first["enqueued"]) == ["consolidate_session", "digest_session", "extract_facts"]
    queues = api.harness.queues()
    assert queues["memjobs_session"]["ready"] == 2 and queues["memjobs_extract"]["ready"] == 1


def test_sessions_lists_digests_with_live_task_status(api_factory: Callable[..., Api]) -> None:
    api = api_factory()
    api.harness.runtime.sessions.save_digest(
        owner_key("alice"), "s-1", "trip", "planned a trip", [TaskRef(task_id="t1", goal="book the hotel")]
    )
    listed = api.get("/v1/sessions", owner="alice").json()
    assert listed["sessions"][0]["tasks"][0]["status_known"] is False
    r = api.http.put("/v1/tasks/t1", json={"owner_id": "alice", "goal": "book the hotel", "status": "succeeded"})
    assert r.status_code == 202 and r.json() == {"task_id": "t1", "status": "queued"}
    api.harness.drain()
    listed = api.get("/v1/sessions", owner="alice", params={"days": 1}).json()
    assert listed["truncated"] is False
    (session,) = listed["sessions"]
    assert (session["session_id"], session["topic"], session["gist"]) == ("s-1", "trip", "planned a trip")
    assert session["tasks"] == [
        {"task_id": "t1", "goal": "book the hotel", "status": "succeeded", "status_known": True}
    ]
    assert api.get("/v1/sessions", owner="bob").json()["sessions"] == []
    problem(api.http.put("/v1/tasks/t1", json={"owner_id": "alice", "goal": "x", "status": "done"}), "validation", 422)


# -- knowledge -----------------------------------------------------------------------------


def test_reindex_then_search(api_factory: Callable[..., Api]) -> None:
    api = api_factory()
    docs = [
        {"doc_id": "tea", "title": "Tea notes", "text": "Oolong tea is half oxidised."},
        {"doc_id": "bike", "title": "Bike notes", "text": "Check the tyre pressure weekly."},
    ]
    r = api.post("/v1/knowledge/reindex", {"owner_id": "alice", "consent": True, "documents": docs})
    assert r.status_code == 202 and r.json() == {"documents": 2, "status": "queued"}
    api.harness.drain()
    found = api.post("/v1/knowledge/search", {"owner_id": "alice", "query": "oolong", "k": 1}).json()
    assert [(h["title"], h["trust"]) for h in found["results"]] == [("Tea notes", "untrusted_external")]
    assert found["mode"] == "keyword" and found["notice"]
    assert api.post("/v1/knowledge/search", {"owner_id": "bob", "query": "oolong"}).json()["results"] == []


def test_reindex_without_consent_is_refused(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    body = problem(
        api.post("/v1/knowledge/reindex", {"owner_id": "a", "consent": False, "documents": []}), "consent_required", 422
    )
    assert "consent" in body["detail"]
    assert api.harness.queues()["memjobs_knowledge"]["ready"] == 0


def test_knowledge_off_is_its_own_problem(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, knowledge="off")
    problem(api.post("/v1/knowledge/search", {"owner_id": "a", "query": "x"}), "knowledge_off", 409)
    problem(
        api.post("/v1/knowledge/reindex", {"owner_id": "a", "consent": True, "documents": []}), "knowledge_off", 409
    )


def test_readyz_says_degraded_while_a_model_breaker_is_open_and_remember_still_works(
    api_factory: Callable[..., Api],
) -> None:
    api = api_factory(worker=False)
    assert api.get("/readyz").json() == {
        "status": "ready",
        "redis": "ok",
        "state_store": "ok",
        "models": {"chat": "closed", "embed": "closed"},
    }
    chat = api.harness.runtime.model_breakers["chat"]
    for _ in range(api.harness.settings.model.breaker_failures):
        chat.failed(Ticket.CLOSED)
    # (one /readyz answer serves every probe for a second: the next one says it)
    ready = wait_for(
        lambda: (r := api.get("/readyz")).json()["status"] == "degraded" and r, 10, "/readyz to say degraded"
    )
    assert ready.status_code == 200  # still in rotation: remembers are taken and kept pending
    assert ready.json()["models"] == {"chat": "open", "embed": "closed"}
    remember(api, "dora@example.com", "I walk the dog at six")
    probe = chat.admit()
    assert probe is Ticket.PROBE
    chat.succeeded(probe)
    wait_for(lambda: api.get("/readyz").json()["status"] == "ready", 10, "/readyz to say ready again")
