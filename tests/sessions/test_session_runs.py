"""Session end on the real stack (Redis, PostgreSQL, Dramatiq worker, the fake model):
one run per session whatever the delivery, no transcript secret kept in Redis,
and malformed model output ending each job within seconds with its reason."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from prometheus_client import REGISTRY

from memjobs_client import keys
from memjobs_client.contracts import ConsolidateSession, owner_key
from memjobs_client.errors import SensitiveContent
from memjobs_worker.embedded.redis import EmbeddedRedis
from tests.support.harness import REPO, Harness, HarnessFactory, MakeSettings, kill_group, spawn_workers, worker_env
from tests.support.openai_server import EMPTY_FACTS_REPLY, FakeOpenAI, is_consolidation, patch_reply
from tests.support.polling import wait_for
from tests.support.redis_values import as_bytes

OWNER = "runs@example.com"
KEY = owner_key(OWNER)
TRANSCRIPT = [
    {"role": "user", "text": "I moved to Hangzhou last month.", "ts": "2026-11-29T10:00:00Z"},
    {"role": "assistant", "text": "Noted.", "ts": "2026-11-29T10:00:01Z"},
]
PATCH = patch_reply("- Lives in Hangzhou", "I moved to Hangzhou last month")


def jobs(actor: str, outcome: str) -> float:
    return REGISTRY.get_sample_value("memjobs_jobs_total", {"actor": actor, "outcome": outcome}) or 0.0


def message(payload: dict[str, Any], actor: str = "consolidate_session") -> dramatiq.Message[Any]:
    return dramatiq.Message(queue_name="memjobs_session", actor_name=actor, args=(payload,), kwargs={}, options={})


def memory_md(h: Harness) -> str:
    return {d.doc: d.content for d in h.runtime.memory_docs.snapshot(OWNER)}["MEMORY.md"]


def applied_audits(h: Harness) -> int:
    return sum(1 for e in h.runtime.audit.entries(limit=1000) if e.applied)


@pytest.fixture
def h(model_settings: MakeSettings, harness_factory: HarnessFactory, fake_model: FakeOpenAI) -> Harness:
    fake_model.set_chat_handler(lambda r: PATCH if is_consolidation(r) else EMPTY_FACTS_REPLY)
    return harness_factory(model_settings(lease_ms=1500))


def payload(session_id: str) -> dict[str, Any]:
    return ConsolidateSession.model_validate(
        {"owner_key": KEY, "session_id": session_id, "transcript": TRANSCRIPT}
    ).model_dump(mode="json")


# -- exactly once ----------------------------------------------------------------


def test_two_deliveries_at_once_make_one_model_call_and_apply_once(h: Harness, fake_model: FakeOpenAI) -> None:
    fake_model.slow_next("chat", 0.5)  # the first call is still running when the second delivery starts
    before = jobs("consolidate_session", "succeeded")
    h.broker.enqueue(message(payload("r-1")))
    h.broker.enqueue(message(payload("r-1")))
    h.start_worker(threads=4)
    h.drain()
    assert len(fake_model.requests_for("chat")) == 1
    assert memory_md(h) == "- Lives in Hangzhou" and applied_audits(h) == 1
    assert jobs("consolidate_session", "succeeded") == before + 1
    [run] = h.runtime.sessions.run_records(KEY, 1)
    assert (run.state, run.attempts) == ("done", 1)


def test_a_redelivery_during_the_model_call_is_a_duplicate(h: Harness, fake_model: FakeOpenAI) -> None:
    fake_model.hang_next("chat")
    h.start_worker(threads=4)
    duplicates = jobs("consolidate_session", "duplicate")
    h.broker.enqueue(message(payload("r-2")))
    fake_model.wait_for_request("chat", 1)  # the first delivery is inside its model call
    h.broker.enqueue(message(payload("r-2")))  # the same message again (a redelivery)
    wait_for(
        lambda: jobs("consolidate_session", "duplicate") > duplicates,
        30,
        "the duplicate consolidation to be counted",
        poll_s=0.02,
    )
    fake_model.release()
    h.drain()
    assert len(fake_model.requests_for("chat")) == 1
    assert memory_md(h) == "- Lives in Hangzhou" and applied_audits(h) == 1


def test_a_run_whose_holder_died_mid_call_is_taken_over_after_its_lease(h: Harness, fake_model: FakeOpenAI) -> None:
    from datetime import timedelta

    # A worker claimed the run and died in its model call: its claim is never renewed.
    dead = h.runtime.sessions.runs.claim(KEY, "r-3", "consolidate", timedelta(milliseconds=1500))
    assert dead is not None
    h.start_worker()
    h.broker.enqueue(message(payload("r-3")))  # Dramatiq redelivers the dead worker's message
    h.drain()  # the delivery sees a live lease, leaves a check-back, which takes the run over
    assert len(fake_model.requests_for("chat")) == 1
    assert memory_md(h) == "- Lives in Hangzhou"
    [run] = h.runtime.sessions.run_records(KEY, 1)
    assert (run.state, run.attempts) == ("done", 2)
    assert not h.runtime.sessions.runs.holds(dead)


def test_kill_9_in_the_model_call_is_taken_over_and_applied_once(
    h: Harness, fake_model: FakeOpenAI, tmp_path: Path
) -> None:
    settings = h.settings.updated(workers={"broker_heartbeat_timeout_ms": 2000})
    fake_model.hang_next("chat")
    doomed = spawn_workers(settings, tmp_path / "doomed.log", processes=1, threads=1)
    try:
        h.broker.enqueue(message(payload("r-k")))
        fake_model.wait_for_request("chat", 1, timeout_s=60)  # the real worker is in its model call
    finally:
        kill_group(doomed)  # SIGKILL, mid-call: its claim is never renewed nor finished
    h.start_worker()  # Dramatiq redelivers the dead worker's message after its heartbeat times out
    h.drain()
    assert len(fake_model.requests_for("chat")) == 2  # the dead worker's call and the takeover's
    assert memory_md(h) == "- Lives in Hangzhou" and applied_audits(h) == 1
    [run] = h.runtime.sessions.run_records(KEY, 1)
    # Taken over at least once; on a loaded machine a check-back may claim the run
    # once more after the takeover's lease lapsed, and still nothing is applied twice.
    assert run.state == "done" and run.attempts >= 2


def test_a_lost_redis_marker_does_not_consolidate_twice(h: Harness, fake_model: FakeOpenAI) -> None:
    h.start_worker()
    h.client.consolidation_enabled = True
    assert h.client.end_session(OWNER, "r-4", TRANSCRIPT) != []
    h.drain()
    for marker in h.runtime.redis.scan_iter(match=keys.session_ended("*", "*")):
        h.runtime.redis.delete(marker)  # Redis lost its marker: the gateway ends the session again
    assert h.client.end_session(OWNER, "r-4", TRANSCRIPT) != []
    h.drain()
    assert len([r for r in fake_model.requests_for("chat") if r.json and is_consolidation(r.json)]) == 1
    assert memory_md(h) == "- Lives in Hangzhou" and applied_audits(h) == 1


# -- no transcript secret kept in Redis -------------------------------------------------


def _redis_files(server: EmbeddedRedis) -> bytes:
    return b"".join(p.read_bytes() for p in Path(server.directory).rglob("*") if p.is_file())


def _readable(raw: bytes | str) -> str:
    """A stored value as text; a message body's JSON with its ``\\u`` escapes decoded."""
    text = as_bytes(raw).decode("utf-8", "replace")
    try:
        return json.dumps(json.loads(text), ensure_ascii=False)
    except ValueError:
        return text


def _redis_values(h: Harness) -> str:
    client, parts = h.runtime.redis, []
    for key in client.scan_iter(match=f"{keys.NAMESPACE}:*"):
        kind = client.type(key)
        if kind == b"hash":
            parts += [_readable(v) for v in client.hvals(key)]
        elif kind == b"list":
            parts += [_readable(v) for v in client.lrange(key, 0, -1)]
        elif kind == b"string":
            parts.append(_readable(client.get(key) or b""))
    return "\n".join(parts)


def test_a_transcript_secret_is_not_in_redis_files_nor_in_the_dead_letter_set(
    model_settings: MakeSettings, harness_factory: HarnessFactory, fake_model: FakeOpenAI, redis_server: EmbeddedRedis
) -> None:
    # No outage budget: the model down past it, the counted retries (none) dead-letter.
    h = harness_factory(
        model_settings(session_digest="on", max_retries=0, model_max_attempts=1, outage_retry_budget_ms=0)
    )
    password, key = "Zx" + secrets.token_hex(5), "sk-" + secrets.token_hex(16)
    marker = f"marker-{secrets.token_hex(4)}"
    transcript = [
        {"role": "user", "text": f"{marker}: 我的密码是{password}，记一下", "ts": "2026-11-29T10:00:00Z"},
        {"role": "user", "text": f"and my api key is {key} ok", "ts": "2026-11-29T10:00:01Z"},
    ]
    tasks = [{"task_id": "t-1", "goal": f"把 wifi 密码 {password} 发给老婆"}]
    h.client.end_session(OWNER, "r-5", transcript, tasks=tasks)
    queued = _redis_values(h)  # as enqueued, before any worker ran
    assert f"{marker}: 我的密码是[REDACTED]，记一下" in queued and "把 wifi 密码 [REDACTED] 发给老婆" in queued
    assert password not in queued and key not in queued
    fake_model.fail_next("chat", 500, count=10)  # the model is down: both jobs are dead-lettered
    h.start_worker()
    h.drain()
    dead = h.queues()["memjobs_session"]["dead"]
    assert dead == 2
    stored = _redis_values(h)
    assert marker in stored and "[REDACTED]" in stored  # the dead letters kept the rest of the turn
    wait_for(
        lambda: marker.encode() in _redis_files(redis_server),
        30,  # the append-only file has them too
        "the marker in Redis's files",
        poll_s=0.02,
    )
    files = _redis_files(redis_server)
    for secret in (password, key):
        assert secret not in stored and secret.encode() not in files
        assert secret not in fake_model.all_text_sent()


# -- malformed model output: bounded, recorded ----------------------------------------------


@pytest.mark.parametrize(
    "answer", [json.dumps({"result": "ok", "items": [1, 2]}), "Sure! The user talked about moving to Hangzhou."]
)
def test_malformed_output_ends_each_session_end_job_at_once(
    model_settings: MakeSettings, harness_factory: HarnessFactory, fake_model: FakeOpenAI, answer: str
) -> None:
    fake_model.set_chat_handler(lambda request: answer)  # every prompt gets the same bad answer
    h = harness_factory(model_settings(session_digest="on", min_backoff_ms=1000, max_backoff_ms=300_000))
    retried = {actor: jobs(actor, "retried") for actor in ("consolidate_session", "digest_session")}
    h.start_worker()
    started = time.monotonic()
    assert h.client.end_session(OWNER, "r-6", TRANSCRIPT) == ["consolidate_session", "digest_session", "extract_facts"]
    h.drain(timeout_s=30)
    elapsed = time.monotonic() - started
    print(
        f"malformed output ({'prose' if answer.startswith('Sure') else 'wrong-shape JSON'}): "
        f"both session-end jobs failed with their reason {elapsed:.2f} s after end_session"
    )
    # "Within seconds" is asserted by events, not by the clock (a loaded machine is slow,
    # not wrong): no Dramatiq retry, so no backoff of 1 s to 5 min is ever waited for.
    assert {actor: jobs(actor, "retried") for actor in retried} == retried
    assert len(fake_model.requests_for("chat")) == 4  # two per job: one quick retry each
    runs = {r.kind: (r.state, r.reason) for r in h.runtime.sessions.run_records(KEY, 1)}
    assert runs == {"consolidate": ("failed", "model_output_invalid"), "digest": ("failed", "model_output_invalid")}
    assert jobs("consolidate_session", "model_output_invalid") >= 1
    assert jobs("digest_session", "model_output_invalid") >= 1
    assert h.queues()["memjobs_session"]["dead"] == 0
    if answer.startswith("Sure"):  # the operator's view, once
        listed = subprocess.run(
            [sys.executable, "-m", "memjobs_worker.cli.main", "sessions", "--owner", OWNER, "--runs", "--json"],
            env=worker_env(h.settings),
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert sorted((r["kind"], r["state"], r["reason"]) for r in json.loads(listed.stdout)) == [
            ("consolidate", "failed", "model_output_invalid"),
            ("digest", "failed", "model_output_invalid"),
        ]


def test_a_session_id_that_looks_like_a_credential_is_refused_and_nothing_is_queued(h: Harness) -> None:
    with pytest.raises(SensitiveContent):
        h.client.end_session(OWNER, "sk-" + secrets.token_hex(16), TRANSCRIPT)
    assert all(q["ready"] == 0 and q["delayed"] == 0 for q in h.queues().values())


def test_a_hand_written_message_with_a_secret_is_redacted_by_the_worker(h: Harness, fake_model: FakeOpenAI) -> None:
    key = "sk-" + secrets.token_hex(16)
    crafted = payload("r-7")
    crafted["transcript"][0]["text"] = f"I moved to Hangzhou last month. My api key is {key}"
    h.broker.enqueue(message(crafted))  # straight into Redis: the producer never saw it
    h.start_worker()
    h.drain()
    sent = fake_model.all_text_sent()
    assert "I moved to Hangzhou last month. My api key is [REDACTED]" in sent and key not in sent
    assert memory_md(h) == "- Lives in Hangzhou"
