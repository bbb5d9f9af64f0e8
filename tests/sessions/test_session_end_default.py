"""Session end by default (issue 22): every producer door queues consolidation
and the digest without being told to, and the workers decide with their own
settings.

The door tests give the producer no model at all (its process has no key, like
a gateway) and the worker a model (the stand-in): through the bare Python
client, the CLI, HTTP and the TypeScript client the session reaches
consolidation. A worker without a model, or with consolidation off, skips the
job and says so (``no_model`` / ``switched_off``), not a failure. A job not
queued (opted out of, or refused by Redis) is queued by a later end of the
same session; one queued is never queued twice.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from memjobs_client import MemjobsClient, keys
from memjobs_client.contracts import content_hash, owner_key
from memjobs_client.errors import BackendUnavailable
from memjobs_worker.settings import Settings
from tests.support.cli import run_cli
from tests.support.harness import REPO, Harness, worker_env
from tests.support.http import Api
from tests.support.openai_server import EMPTY_FACTS_REPLY, FakeOpenAI, is_consolidation, patch_reply
from tests.support.polling import wait_for
from tests.support.redis_values import as_bytes

OWNER = "mei@example.com"
KEY = owner_key(OWNER)
TRANSCRIPT = [
    {"role": "user", "text": "I moved to Hangzhou last month.", "ts": "2026-11-29T10:00:00Z"},
    {"role": "assistant", "text": "Noted.", "ts": "2026-11-29T10:00:05Z"},
]
ALL = ["consolidate_session", "digest_session", "extract_facts"]


@pytest.fixture
def worker(
    model_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness], fake_model: FakeOpenAI
) -> Harness:
    """A worker with the model stand-in configured (the digest off, as by default)."""
    fake_model.set_chat_handler(
        lambda request: (
            patch_reply("- Lives in Hangzhou", "I moved to Hangzhou")
            if is_consolidation(request)
            else EMPTY_FACTS_REPLY
        )
    )
    h = harness_factory(model_settings())
    h.start_worker()
    return h


@pytest.fixture
def no_model(make_settings: Callable[..., Settings]) -> Settings:
    """A producer's settings: no key, no model endpoint (as a gateway's)."""
    settings = make_settings(dashscope_api_key="")
    assert not settings.model_configured and not settings.consolidation_enabled
    return settings


def jobs(actor: str, outcome: str) -> float:
    return REGISTRY.get_sample_value("memjobs_jobs_total", {"actor": actor, "outcome": outcome}) or 0.0


def reaches_consolidation(h: Harness, session_id: str, fake: FakeOpenAI) -> None:
    def consolidated() -> bool:
        return any(
            r.kind == "consolidate" and r.session_id == session_id and r.state == "done"
            for r in h.runtime.sessions.run_records(KEY, 1)
        )

    wait_for(consolidated, 60, f"the consolidation of {session_id} done on the worker")
    assert any(r.json and is_consolidation(r.json) for r in fake.requests_for("chat"))
    h.drain()


# -- the four doors ------------------------------------------------------------------


def test_the_bare_python_client_reaches_consolidation(worker: Harness, fake_model: FakeOpenAI) -> None:
    client = MemjobsClient(worker.settings.redis.url)  # the README's gateway example: no switches
    try:
        assert client.end_session(OWNER, "py-1", TRANSCRIPT) == ALL
    finally:
        client.close()
    reaches_consolidation(worker, "py-1", fake_model)


def test_the_cli_reaches_consolidation(
    worker: Harness, no_model: Settings, fake_model: FakeOpenAI, tmp_path: Path
) -> None:
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps(TRANSCRIPT))
    end_session = ("end-session", "--owner", OWNER, "--transcript", str(transcript), "--session")
    done = run_cli(worker_env(no_model), *end_session, "cli-1", "--json")
    assert done.code == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["status"] == "queued" and reply["enqueued"] == ALL
    # This CLI's own settings have no model: it says a worker like it would skip it.
    assert [o["job"] for o in reply["switched_off"]] == ["consolidate_session", "digest_session"]
    reaches_consolidation(worker, "cli-1", fake_model)
    opted = run_cli(worker_env(no_model), *end_session, "cli-2", "--no-consolidate", "--no-digest")
    assert opted.code == 0, opted.stderr
    assert opted.stdout.splitlines() == [
        "session cli-2: queued extract_facts",
        "  consolidate_session not queued (opted out)",
        "  digest_session not queued (opted out)",
    ]


@pytest.fixture
def api(api_factory: Callable[..., Api], no_model: Settings) -> Api:
    return api_factory(worker=False, settings=no_model.updated(api={"port": 0}))


def test_http_reaches_consolidation(worker: Harness, api: Api, fake_model: FakeOpenAI) -> None:
    r = api.post("/v1/sessions/http-1/end", {"owner_id": OWNER, "transcript": TRANSCRIPT})
    assert r.status_code == 202, r.text
    assert r.json() == {"session_id": "http-1", "status": "queued", "enqueued": ALL, "opted_out": []}
    reaches_consolidation(worker, "http-1", fake_model)


def test_http_opts_out_and_a_later_end_queues_what_was_left(api: Api) -> None:
    first = api.post(
        "/v1/sessions/http-2/end", {"owner_id": OWNER, "transcript": TRANSCRIPT, "consolidate": False, "digest": False}
    )
    assert first.json() == {
        "session_id": "http-2",
        "status": "queued",
        "enqueued": ["extract_facts"],
        "opted_out": ["consolidate_session", "digest_session"],
    }
    again = api.post("/v1/sessions/http-2/end", {"owner_id": OWNER, "transcript": TRANSCRIPT})
    assert again.json()["enqueued"] == ["consolidate_session", "digest_session"]
    last = api.post("/v1/sessions/http-2/end", {"owner_id": OWNER, "transcript": TRANSCRIPT})
    assert last.json() == {"session_id": "http-2", "status": "already_ended", "enqueued": [], "opted_out": []}


NODE = shutil.which("node")

TS_SCRIPT = """
import { MemjobsClient } from "./src/index.js";
const client = new MemjobsClient({ baseUrl: process.env.MEMJOBS_API_URL });
const reply = await client.endSession({ ownerId: process.env.OWNER, sessionId: "ts-1",
                                        transcript: JSON.parse(process.env.TRANSCRIPT) });
console.log(JSON.stringify(reply));
"""


@pytest.mark.skipif(NODE is None, reason="node is not installed: the TypeScript client needs Node.js 20+")
def test_the_typescript_client_reaches_consolidation(worker: Harness, api: Api, fake_model: FakeOpenAI) -> None:
    assert NODE is not None
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", TS_SCRIPT],
        cwd=REPO / "clients" / "typescript",
        env={**os.environ, "MEMJOBS_API_URL": api.url, "OWNER": OWNER, "TRANSCRIPT": json.dumps(TRANSCRIPT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["status"] == "queued" and reply["enqueued"] == ALL
    reaches_consolidation(worker, "ts-1", fake_model)


# -- the workers decide -----------------------------------------------------------------


@pytest.mark.parametrize(
    "setting", [{"dashscope_api_key": ""}, {"memory_auto": "off"}], ids=["blank_key", "memory_auto_off"]
)
def test_a_worker_without_a_model_or_switched_off_skips_cleanly(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI,
    setting: dict[str, str],
) -> None:
    overrides: dict[str, Any] = dict(setting)
    if "memory_auto" in setting:  # a model configured, switched off by QWEN_AUDIO_MEMORY_AUTO
        overrides.update(memory_base_url=fake_model.base_url, memory_api_key="k")
    h = harness_factory(make_settings(**overrides))
    h.start_worker()
    outcome = "switched_off" if "memory_auto" in setting else "no_model"
    before = {a: jobs(a, o) for a, o in (("consolidate_session", outcome), ("digest_session", "switched_off"))}
    assert h.client.end_session(OWNER, "skip-1", TRANSCRIPT) == ALL
    h.drain()
    assert jobs("consolidate_session", outcome) == before["consolidate_session"] + 1
    assert jobs("digest_session", "switched_off") == before["digest_session"] + 1
    assert not [r for r in fake_model.requests_for("chat") if r.json and is_consolidation(r.json)]
    # No run worked and none failed: each ended skipped, with its reason.
    runs = {r.kind: (r.state, r.attempts, r.reason) for r in h.runtime.sessions.run_records(KEY, 1)}
    assert runs == {"consolidate": ("skipped", 0, outcome), "digest": ("skipped", 0, "switched_off")}
    assert all(q.get("dead", 0) == 0 for q in h.queues().values()), h.queues()


# -- opting out, and ending again ---------------------------------------------------------


def test_an_opted_out_job_is_queued_by_a_later_end(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(make_settings())  # no worker: only what is queued is looked at
    assert h.client.end_session(OWNER, "opt-1", TRANSCRIPT, consolidate=False) == ["digest_session", "extract_facts"]
    assert h.client.end_session(OWNER, "opt-1", TRANSCRIPT) == ["consolidate_session"]
    assert h.client.end_session(OWNER, "opt-1", TRANSCRIPT) == []
    opted = MemjobsClient(broker=h.broker, consolidation_enabled=False, digest_enabled=False)
    assert opted.end_session(OWNER, "opt-2", TRANSCRIPT) == ["extract_facts"]
    assert h.queues()["memjobs_session"]["ready"] == 2  # one consolidation, one digest


def test_a_job_redis_refused_is_queued_when_the_session_is_ended_again(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = harness_factory(make_settings())
    client = h.client
    real_send = client._send

    def refuse_the_digest(actor: str, payload: dict[str, Any], **kw: Any) -> None:
        if actor == "digest_session":
            raise BackendUnavailable("Redis did not take the digest_session job: injected")
        real_send(actor, payload, **kw)

    monkeypatch.setattr(client, "_send", refuse_the_digest)
    with pytest.raises(BackendUnavailable):
        client.end_session(OWNER, "retry-1", TRANSCRIPT)
    monkeypatch.setattr(client, "_send", real_send)
    # The corrected retry queues what was missing, and not the consolidation again.
    assert client.end_session(OWNER, "retry-1", TRANSCRIPT) == ["digest_session", "extract_facts"]
    assert h.queues()["memjobs_session"]["ready"] == 2
    marker = keys.session_ended(KEY, content_hash("retry-1"))
    assert {as_bytes(m).decode() for m in h.runtime.redis.smembers(marker)} == set(ALL)
    assert 0 < h.runtime.redis.ttl(marker) <= 7 * 24 * 3600


def test_a_marker_left_by_an_older_version_is_replaced(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(make_settings())
    marker = keys.session_ended(KEY, content_hash("old-1"))
    h.runtime.redis.set(marker, "1", ex=3600)  # "ended", as memjobs wrote it before
    assert h.client.end_session(OWNER, "old-1", TRANSCRIPT) == ALL
    assert h.client.end_session(OWNER, "old-1", TRANSCRIPT) == []
