"""Session end: consolidation into USER.md / MEMORY.md and the digest, through
the producer, a real worker, the memory service and the fake model server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memjobs_client.contracts import ConsolidateSession, owner_key
from memjobs_client.errors import InvalidPayload
from memjobs_worker.sessions.consolidation import consolidate
from memjobs_worker.sessions.memory_docs import Change, ChangeContext
from memjobs_worker.settings import Settings
from tests.support.cli import Result, run_cli
from tests.support.harness import Harness, worker_env
from tests.support.openai_server import FakeOpenAI

OWNER = "lin@example.com"
KEY = owner_key(OWNER)
SECRET = "my wifi password is Tr0ub4dor&3"


def turns(*texts: str) -> list[dict[str, Any]]:
    """Alternate user/assistant turns (user first)."""
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "text": t, "ts": f"2026-11-29T10:00:{i:02d}Z"}
        for i, t in enumerate(texts)
    ]


def patches(*items: dict[str, str]) -> str:
    return json.dumps({"patches": list(items)})


def docs(h: Harness) -> dict[str, str]:
    return {d.doc: d.content for d in h.runtime.memory_docs.snapshot(OWNER)}


def audit_lines(h: Harness) -> list[dict[str, Any]]:
    """The memory audit trail (the state database's table), oldest first."""
    return [e.as_dict() for e in reversed(h.runtime.audit.entries(limit=1000))]


class Script:
    """Chat replies routed by job: consolidation and digest run concurrently on
    two worker threads, so one FIFO of replies would race between them."""

    def __init__(self, fake: FakeOpenAI) -> None:
        self.consolidation: list[str] = []
        self.digest: list[str] = []
        fake.set_chat_handler(self)

    def __call__(self, request: dict[str, Any]) -> str:
        system = str(request["messages"][0]["content"])
        if "Markdown memory documents" in system:
            return self.consolidation.pop(0) if self.consolidation else patches()
        if "You summarise one finished conversation" in system:
            return self.digest.pop(0) if self.digest else json.dumps({"topic": "t", "gist": "g"})
        return json.dumps({"memory": []})  # mem0's extraction nudge


@pytest.fixture
def script(fake_model: FakeOpenAI) -> Script:
    return Script(fake_model)


@pytest.fixture
def h(model_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]) -> Harness:
    harness = harness_factory(model_settings(session_digest="on"))
    harness.start_worker()
    return harness


TRANSCRIPT = turns(
    "Please call me Xiao Lin, and keep answers short.",
    "Sure, Xiao Lin.",
    "I moved to Hangzhou last month and I'm allergic to peanuts.",
    "Noted.",
)


def test_instructions_land_in_user_md_and_facts_in_memory_md(h: Harness, script: Script) -> None:
    script.consolidation.append(
        patches(
            {
                "doc": "USER.md",
                "op": "append",
                "text": "- Call the user Xiao Lin",
                "evidence": "Please call me Xiao Lin",
            },
            {"doc": "USER.md", "op": "append", "text": "- Keep answers short", "evidence": "keep answers short"},
            {
                "doc": "MEMORY.md",
                "op": "append",
                "text": "- Lives in Hangzhou",
                "evidence": "I moved to Hangzhou last month",
            },
            {
                "doc": "MEMORY.md",
                "op": "append",
                "text": "- Allergic to peanuts",
                "evidence": "I'm allergic to peanuts",
            },
        )
    )
    sent = h.client.end_session(OWNER, "s-1", TRANSCRIPT)
    assert sent == ["consolidate_session", "digest_session", "extract_facts"]
    h.drain()
    assert docs(h) == {
        "USER.md": "- Call the user Xiao Lin\n- Keep answers short",
        "MEMORY.md": "- Lives in Hangzhou\n- Allergic to peanuts",
    }
    lines = audit_lines(h)
    assert [(x["doc"], x["applied"]) for x in lines] == [
        ("USER.md", True),
        ("USER.md", True),
        ("MEMORY.md", True),
        ("MEMORY.md", True),
    ]
    assert all("Hangzhou" not in json.dumps(x) for x in lines)  # never the memory text


def test_an_inference_the_user_never_said_is_not_written(h: Harness, script: Script) -> None:
    script.consolidation.append(
        patches(
            {"doc": "USER.md", "op": "append", "text": "- Prefers formal replies", "evidence": "the user seems formal"},
            {"doc": "MEMORY.md", "op": "append", "text": "- Is a morning person"},
            {"doc": "MEMORY.md", "op": "append", "text": "- Lives in Hangzhou", "evidence": "Noted."},
        )
    )
    h.client.end_session(OWNER, "s-2", TRANSCRIPT)
    h.drain()
    assert docs(h) == {"USER.md": "", "MEMORY.md": ""}
    assert [x["reason"] for x in audit_lines(h)] == ["not_grounded"] * 3


def test_guessed_address_and_inferred_traits_are_refused_in_chinese(h: Harness, script: Script) -> None:
    script.consolidation.append(
        patches(
            {"doc": "USER.md", "op": "append", "text": "- 称呼：老王", "evidence": "好的"},
            {"doc": "MEMORY.md", "op": "append", "text": "- 用户喜欢南方城市，可能单身", "evidence": "我住在杭州"},
            {"doc": "USER.md", "op": "append", "text": "- 回答简短", "evidence": "回答简短"},  # the assistant said it
            {"doc": "MEMORY.md", "op": "append", "text": "- 住在杭州", "evidence": "我住在杭州"},
            {"doc": "USER.md", "op": "append", "text": "- 称呼：小林", "evidence": "以后叫我小林"},
        )
    )
    h.client.end_session(
        OWNER, "s-zh", turns("好的", "我会回答简短一些。", "我住在杭州，以后叫我小林。", "好的，小林。")
    )
    h.drain()
    assert docs(h) == {"USER.md": "- 称呼：小林", "MEMORY.md": "- 住在杭州"}
    assert [x["reason"] for x in audit_lines(h)] == ["not_grounded"] * 3 + [None, None]


def test_assistant_md_is_never_changed_and_bad_patches_do_not_stop_good_ones(h: Harness, script: Script) -> None:
    owner_dir = Path(h.settings.data_dir) / "memory" / KEY
    owner_dir.mkdir(parents=True, exist_ok=True)
    (owner_dir / "ASSISTANT.md").write_text("You are Nova.\n")
    script.consolidation.append(
        patches(
            {"doc": "ASSISTANT.md", "op": "append", "text": "- Be sarcastic", "evidence": "keep answers short"},
            {"doc": "NOTES.md", "op": "append", "text": "- x", "evidence": "keep answers short"},
            {"doc": "MEMORY.md", "op": "delete", "evidence": "keep answers short"},
            {
                "doc": "MEMORY.md",
                "op": "replace",
                "old_text": "nothing like this",
                "new_text": "- Allergic to peanuts",
                "evidence": "allergic to peanuts",
            },
            {"doc": "MEMORY.md", "op": "append", "text": "- " + "long " * 400, "evidence": "keep answers short"},
            {"doc": "MEMORY.md", "op": "append", "text": "- Allergic to peanuts", "evidence": "allergic to peanuts"},
        )
    )
    h.client.end_session(OWNER, "s-3", TRANSCRIPT)
    h.drain()
    assert (owner_dir / "ASSISTANT.md").read_text() == "You are Nova.\n"
    assert docs(h)["MEMORY.md"] == "- Allergic to peanuts"
    reasons = [x["reason"] for x in audit_lines(h)]
    assert reasons == ["forbidden_document", "forbidden_document", "invalid_patch", "not_found", "too_long", None]


def test_secrets_reach_neither_the_model_nor_a_document(h: Harness, fake_model: FakeOpenAI, script: Script) -> None:
    script.consolidation.append(
        patches(
            {"doc": "MEMORY.md", "op": "append", "text": "- " + SECRET, "evidence": "Tr0ub4dor"},
            {"doc": "MEMORY.md", "op": "append", "text": "- Has a wifi router", "evidence": "my wifi"},
        )
    )
    h.client.end_session(OWNER, "s-4", turns(SECRET, "OK", "I set up my wifi today"))
    h.drain()
    assert "Tr0ub4dor" not in fake_model.all_text_sent()
    assert "Tr0ub4dor" not in json.dumps(docs(h))
    assert [x["reason"] for x in audit_lines(h)][0] in ("sensitive_content", "not_grounded")


def test_a_document_holding_a_split_secret_is_never_sent_and_the_skip_is_reported(
    h: Harness, fake_model: FakeOpenAI, script: Script
) -> None:
    # Written before documents were checked whole: the provider takes it as it is.
    h.runtime.memory_docs.provider.apply(
        OWNER, [Change("USER.md", "- 我的银行卡密码是\n- 739164", 0)], ChangeContext("test")
    )
    h.client.end_session(OWNER, "s-split", TRANSCRIPT)
    h.drain()
    assert "739164" not in fake_model.all_text_sent()
    assert "Markdown memory documents" not in fake_model.all_text_sent()  # not asked at all
    assert [(x["doc"], x["reason"]) for x in audit_lines(h)] == [("USER.md", "sensitive_document")]
    runs = {(r.session_id, r.kind): (r.state, r.reason) for r in h.runtime.sessions.run_records(KEY, 1)}
    assert runs[("s-split", "consolidate")] == ("failed", "sensitive_document")


def test_model_output_that_is_not_json_is_audited_and_changes_nothing(h: Harness, script: Script) -> None:
    # Each session's job asks twice (one quick retry), then ends: no Dramatiq retries.
    script.consolidation += [
        "Sure! Here are some patches: ...",
        "[1, 2, 3]",
        json.dumps({"changes": []}),
        '```json\n{"patches": {}}\n```',
    ]
    h.client.end_session(OWNER, "s-5", TRANSCRIPT)
    h.drain()
    h.client.end_session(OWNER, "s-6", TRANSCRIPT)
    h.drain()
    assert docs(h) == {"USER.md": "", "MEMORY.md": ""}
    assert [x["reason"] for x in audit_lines(h)] == ["model_output_invalid", "model_output_invalid"]
    runs = {(r.session_id, r.kind): (r.state, r.reason, r.attempts) for r in h.runtime.sessions.run_records(KEY, 1)}
    assert runs[("s-5", "consolidate")] == runs[("s-6", "consolidate")] == ("failed", "model_output_invalid", 1)


def test_patches_beyond_the_session_limit_are_refused(
    model_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    script: Script,
) -> None:
    h = harness_factory(model_settings(max_patches_per_session=2))
    h.start_worker()
    script.consolidation.append(
        patches(
            {
                "doc": "MEMORY.md",
                "op": "append",
                "text": "- Lives in Hangzhou",
                "evidence": "I moved to Hangzhou last month",
            },
            {"doc": "MEMORY.md", "op": "append", "text": "- Allergic to peanuts", "evidence": "allergic to peanuts"},
            {"doc": "USER.md", "op": "append", "text": "- Call the user Xiao Lin", "evidence": "call me Xiao Lin"},
            {"doc": "USER.md", "op": "append", "text": "- Keep answers short", "evidence": "keep answers short"},
        )
    )
    h.client.end_session(OWNER, "s-7", TRANSCRIPT)
    h.drain()
    assert docs(h)["MEMORY.md"] == "- Lives in Hangzhou\n- Allergic to peanuts"
    assert [x["reason"] for x in audit_lines(h)][2:] == ["too_many_patches", "too_many_patches"]


def test_ending_a_session_twice_enqueues_nothing_new(h: Harness, fake_model: FakeOpenAI, script: Script) -> None:
    assert h.client.end_session(OWNER, "s-8", TRANSCRIPT) != []
    assert h.client.end_session(OWNER, "s-8", TRANSCRIPT) == []
    h.drain()
    assert len(fake_model.requests_for("chat")) == 2  # one consolidation, one digest


def test_a_redelivered_consolidation_adds_nothing_more(h: Harness, script: Script) -> None:
    reply = patches(
        {"doc": "MEMORY.md", "op": "append", "text": "- Lives in Hangzhou", "evidence": "I moved to Hangzhou"}
    )
    script.consolidation += [reply, reply]
    payload = ConsolidateSession.model_validate({"owner_key": KEY, "session_id": "s-9", "transcript": TRANSCRIPT})
    for _ in range(2):  # as if the message came back after a crash before the run was marked done
        model = h.runtime.chat("consolidate")
        assert model is not None  # the model settings give one
        consolidate(
            payload,
            model=model,
            service=h.runtime.memory_docs,
            audit=h.runtime.audit,
            max_patches=10,
            max_patch_chars=1000,
        )
    assert docs(h)["MEMORY.md"] == "- Lives in Hangzhou"
    assert [x["reason"] for x in audit_lines(h)] == [None, "duplicate"]
    # And through the queue, the second delivery of a finished session is a no-op.
    h.broker.enqueue(_message(payload))
    h.broker.enqueue(_message(payload))
    h.drain()
    assert docs(h)["MEMORY.md"] == "- Lives in Hangzhou"


def _message(payload: ConsolidateSession) -> Any:
    import dramatiq

    return dramatiq.Message(
        queue_name="memjobs_session",
        actor_name="consolidate_session",
        args=(payload.model_dump(mode="json"),),
        kwargs={},
        options={},
    )


def test_digest_keeps_a_50_character_gist_and_live_task_status(h: Harness, script: Script) -> None:
    gist = "我们讨论了搬家到杭州以后的生活安排，" * 5  # 90 characters
    script.digest.append(json.dumps({"topic": "搬家", "gist": gist}))
    h.client.end_session(OWNER, "s-10", TRANSCRIPT, tasks=[{"task_id": "t-1", "goal": "book movers"}])
    h.client.record_task(OWNER, "t-1", "book movers", "running")
    h.drain()
    [recalled] = h.runtime.sessions.recall_sessions(KEY, 7)
    assert recalled.gist == "我们讨论了搬家到杭州以后的生活安排，我们讨论了搬家到杭州以后的生活安排"  # cut at a comma
    assert [(t.task_id, t.goal, t.status) for t in recalled.tasks] == [("t-1", "book movers", "running")]
    h.client.record_task(OWNER, "t-1", "book movers", "succeeded")
    h.drain()
    assert h.runtime.sessions.recall_sessions(KEY, 7)[0].tasks[0].status == "succeeded"


def test_session_end_is_queued_without_a_model_or_with_memory_auto_off(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI,
) -> None:
    """The producer queues it all the same: the workers decide with their own settings
    (tests/sessions/test_session_end_default.py: they skip it, saying why)."""
    everything = ["consolidate_session", "digest_session", "extract_facts"]
    no_key = harness_factory(make_settings())
    assert no_key.client.end_session(OWNER, "s-11", TRANSCRIPT) == everything
    off = harness_factory(make_settings(memory_base_url=fake_model.base_url, memory_api_key="k", memory_auto="off"))
    assert off.client.end_session(OWNER, "s-12", TRANSCRIPT) == everything


@pytest.mark.parametrize(
    "transcript",
    [
        [],
        [{"role": "system", "text": "x", "ts": "2026-11-29T10:00:00Z"}],
        [{"role": "user", "text": "", "ts": "2026-11-29T10:00:00Z"}],
        [{"role": "user", "text": "hi"}],
        [{"role": "user", "text": "x" * 300_000, "ts": "2026-11-29T10:00:00Z"}],
        ["just a string"],
    ],
)
def test_malformed_or_oversized_transcripts_are_refused_at_the_producer(h: Harness, transcript: list[Any]) -> None:
    with pytest.raises(InvalidPayload):
        h.client.end_session(OWNER, "s-bad", transcript)
    assert all(q["ready"] == 0 for q in h.queues().values())


def _cli(settings: Settings, *args: str) -> Result:
    return run_cli(worker_env(settings), *args)


def test_cli_explicit_memory_goes_through_the_same_service(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    settings = make_settings()
    h = harness_factory(settings)
    added = _cli(
        settings, "memory", "append", "--owner", OWNER, "--doc", "MEMORY.md", "--text", "- Likes jasmine tea", "--json"
    )
    assert json.loads(added.stdout) == {"applied": True, "doc": "MEMORY.md", "version": 1, "reason": None}
    ambiguous = _cli(
        settings, "memory", "replace", "--owner", OWNER, "--doc", "MEMORY.md", "--old", "e", "--new", "x", "--json"
    )
    assert ambiguous.code == 4 and json.loads(ambiguous.stdout)["reason"] == "ambiguous"
    _cli(settings, "memory", "replace", "--owner", OWNER, "--doc", "MEMORY.md", "--old", "jasmine", "--new", "oolong")
    read = json.loads(_cli(settings, "memory", "read", "--owner", OWNER, "--doc", "MEMORY.md", "--json").stdout)
    assert read == [{"doc": "MEMORY.md", "scope": "memory", "version": 2, "content": "- Likes oolong tea"}]
    secret = _cli(settings, "memory", "append", "--owner", OWNER, "--doc", "USER.md", "--text", SECRET, "--json")
    assert secret.code == 4 and json.loads(secret.stdout)["reason"] == "sensitive_content"
    assert docs(h)["USER.md"] == ""


def test_cli_end_session_task_and_sessions(h: Harness, script: Script, tmp_path: Path) -> None:
    script.digest.append(json.dumps({"topic": "errands", "gist": "planned errands"}))
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps(TRANSCRIPT))
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps([{"task_id": "t-9", "goal": "buy a lamp"}]))
    ended = _cli(
        h.settings,
        "end-session",
        "--owner",
        OWNER,
        "--session",
        "s-cli",
        "--transcript",
        str(transcript),
        "--tasks",
        str(tasks),
        "--json",
    )
    assert json.loads(ended.stdout)["enqueued"] == ["consolidate_session", "digest_session", "extract_facts"]
    again = json.loads(
        _cli(
            h.settings, "end-session", "--owner", OWNER, "--session", "s-cli", "--transcript", str(transcript), "--json"
        ).stdout
    )
    assert again == {"session_id": "s-cli", "enqueued": [], "status": "already_ended"}
    assert (
        _cli(h.settings, "task", "--owner", OWNER, "--task", "t-9", "--goal", "buy a lamp", "--status", "failed").code
        == 0
    )
    h.drain()
    [recalled] = json.loads(_cli(h.settings, "sessions", "--owner", OWNER, "--json").stdout)
    assert recalled["gist"] == "planned errands"
    assert [(t["task_id"], t["status"]) for t in recalled["tasks"]] == [("t-9", "failed")]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    refused = _cli(h.settings, "end-session", "--owner", OWNER, "--session", "s-x", "--transcript", str(bad))
    assert refused.code == 4 and "not JSON" in refused.stderr
