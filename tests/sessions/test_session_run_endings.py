"""Every session run reaches a final state — done, skipped with its reason, or
failed with its reason — whatever happened to its messages: dead-lettered after
its retries or at once (a permanent error, an invalid payload), replayed, then
skipped by a worker without a model (issue 30, item 3), or lost altogether.

To dead-letter a consolidation these tests use failures that stay failures
whatever the retry policy for model outages: a memory provider that reports a
version conflict on every write (a counted, transient failure) and a host
provider given a message without the owner id it needs (a permanent one).
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

import dramatiq
import pytest
from prometheus_client import REGISTRY

from memjobs_client.contracts import ConsolidateSession, owner_key
from memjobs_worker.db import create_db_engine
from memjobs_worker.ops.deadletters import DeadLetters
from memjobs_worker.sessions import SessionStore
from memjobs_worker.sessions.memory_docs import PROTOCOL_VERSION
from memjobs_worker.sessions.runs import ABANDONED_AFTER, RunRecord
from tests.support.clocks import ManualClock
from tests.support.harness import Harness, HarnessFactory, MakeSettings
from tests.support.openai_server import FakeOpenAI, patch_reply
from tests.support.polling import wait_for

OWNER = "endings@example.com"
KEY = owner_key(OWNER)
TRANSCRIPT = [{"role": "user", "text": "I moved to Hangzhou last month.", "ts": "2026-11-29T10:00:00Z"}]
PATCH = patch_reply("- Lives in Hangzhou", "I moved to Hangzhou last month")
#: A host provider whose every write meets a newer version: the service gives up
#: with ``version_conflict``, a failure Dramatiq retries and counts.
CONFLICTING = f"{__name__}:ConflictingProvider"


class ConflictingProvider:
    """Reads empty documents; every write answers "changed: 0" (someone wrote first)."""

    def describe(self) -> dict[str, Any]:
        return {"protocolVersion": PROTOCOL_VERSION, "key": "conflicting", "label": "Always conflicting"}

    def list(self, owner_id: str, options: Any) -> list[dict[str, Any]]:
        return []

    def apply(self, owner_id: str, changes: Any, context: Any) -> dict[str, Any]:
        return {"changed": 0, "documents": []}

    def health(self) -> dict[str, Any]:
        return {"ok": True, "detail": ""}

    def close(self) -> None:
        pass


def jobs(actor: str, outcome: str) -> float:
    return REGISTRY.get_sample_value("memjobs_jobs_total", {"actor": actor, "outcome": outcome}) or 0.0


def payload(session_id: str, *, with_owner_id: bool = True) -> dict[str, Any]:
    fields: dict[str, Any] = {"owner_key": KEY, "session_id": session_id, "transcript": TRANSCRIPT}
    if with_owner_id:
        fields["owner_id"] = OWNER
    return ConsolidateSession.model_validate(fields).model_dump(mode="json")


def message(body: dict[str, Any], actor: str = "consolidate_session") -> dramatiq.Message[Any]:
    return dramatiq.Message(queue_name="memjobs_session", actor_name=actor, args=(body,), kwargs={}, options={})


def run_of(h: Harness, session_id: str, kind: str = "consolidate") -> RunRecord | None:
    return next(
        (r for r in h.runtime.sessions.run_records(KEY, 1) if r.session_id == session_id and r.kind == kind), None
    )


def ended(h: Harness, session_id: str, state: str) -> RunRecord:
    """The run, once it is in ``state`` (a dead letter's run ends on the worker's
    consumer thread just after the nack that empties the queue)."""
    found = wait_for(
        lambda: (r := run_of(h, session_id)) is not None and r.state == state and r,
        30,
        f"run {session_id} to be {state}",
    )
    assert isinstance(found, RunRecord)
    return found


@pytest.fixture(autouse=True)
def _patching_model(fake_model: FakeOpenAI) -> None:
    fake_model.set_chat_handler(lambda request: PATCH)


def dead_letter_a_consolidation(h: Harness, session_id: str, cause: str) -> RunRecord:
    """Enqueue a consolidation that ``cause`` dead-letters; its run once ended."""
    h.broker.enqueue(message(payload(session_id, with_owner_id=cause != "permanent_error")))
    h.start_worker()
    h.drain()
    run = ended(h, session_id, "failed")
    h.stop_worker()
    assert h.queues()["memjobs_session"]["dead"] == 1
    return run


@pytest.mark.parametrize(
    ("cause", "reason", "attempts"),
    [
        ("retries_spent", "version_conflict", 2),  # max_retries=1: two tries, then the dead letters
        ("permanent_error", "owner_id_missing", 1),  # the host provider needs the owner id: at once
    ],
)
def test_a_dead_lettered_consolidation_replayed_to_a_worker_without_a_model_ends_skipped(
    model_settings: MakeSettings,
    make_settings: MakeSettings,
    harness_factory: HarnessFactory,
    cause: str,
    reason: str,
    attempts: int,
) -> None:
    h = harness_factory(model_settings(memory_docs_provider=CONFLICTING, max_retries=1))
    run = dead_letter_a_consolidation(h, "end-1", cause)
    assert (run.state, run.attempts, run.reason) == ("failed", attempts, reason)

    # The operator replays it; the worker that takes it has no model configured.
    without_model = harness_factory(make_settings(dashscope_api_key=""))
    skipped = jobs("consolidate_session", "no_model")
    assert DeadLetters(without_model.runtime.redis, without_model.broker).retry_all() == (1, 0)
    without_model.start_worker()
    without_model.drain()
    run = ended(without_model, "end-1", "skipped")
    assert (run.attempts, run.reason) == (attempts, "no_model")
    assert jobs("consolidate_session", "no_model") == skipped + 1
    assert without_model.queues()["memjobs_session"]["dead"] == 0


def test_a_dead_lettered_consolidation_replayed_to_a_worker_with_a_model_ends_done(
    model_settings: MakeSettings, harness_factory: HarnessFactory, fake_model: FakeOpenAI
) -> None:
    h = harness_factory(model_settings(memory_docs_provider=CONFLICTING, max_retries=0))
    dead_letter_a_consolidation(h, "end-2", "retries_spent")
    fixed = harness_factory(model_settings())  # the documents' provider works again
    assert DeadLetters(fixed.runtime.redis, fixed.broker).retry_all() == (1, 0)
    fixed.start_worker()
    fixed.drain()
    run = ended(fixed, "end-2", "done")
    assert (run.attempts, run.reason) == (2, None)
    memory = {d.doc: d.content for d in fixed.runtime.memory_docs.snapshot(OWNER)}["MEMORY.md"]
    assert memory == "- Lives in Hangzhou"


def test_only_the_replay_of_its_dead_letter_runs_a_dead_lettered_run_again(
    model_settings: MakeSettings, harness_factory: HarnessFactory, fake_model: FakeOpenAI
) -> None:
    h = harness_factory(model_settings(memory_docs_provider=CONFLICTING, max_retries=0))
    dead_letter_a_consolidation(h, "end-3", "retries_spent")
    calls = len(fake_model.requests_for("chat"))
    fixed = harness_factory(model_settings())
    duplicates = jobs("consolidate_session", "duplicate")
    fixed.broker.enqueue(message(payload("end-3")))  # the same session again, another message
    fixed.start_worker()
    fixed.drain()
    assert jobs("consolidate_session", "duplicate") == duplicates + 1
    assert len(fake_model.requests_for("chat")) == calls
    run = run_of(fixed, "end-3")
    assert run is not None and (run.state, run.reason) == ("failed", "version_conflict")


def test_an_invalid_payload_ends_its_run_failed_and_a_secret_session_id_names_no_run(
    model_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    h = harness_factory(model_settings())
    invalid = {**payload("end-4"), "transcript": [{"role": "robot", "text": "beep", "ts": "2026-11-29"}]}
    secret_id = "sk-" + secrets.token_hex(16)
    h.broker.enqueue(message(invalid))
    h.broker.enqueue(message({**payload("end-5"), "session_id": secret_id}))
    h.start_worker()
    h.drain()
    run = ended(h, "end-4", "failed")
    assert (run.attempts, run.reason) == (0, "invalid_payload")
    h.stop_worker()  # every hook of both messages has run
    assert {r.session_id for r in h.runtime.sessions.run_records(KEY, 1)} == {"end-4"}
    assert h.queues()["memjobs_session"]["dead"] == 1  # the secret was acknowledged, not kept


def test_a_skip_leaves_a_held_or_ended_run_as_it_is(
    make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    runs = harness_factory(make_settings()).runtime.sessions.runs
    claim = runs.claim(KEY, "end-6", "consolidate", timedelta(minutes=5))
    assert claim is not None
    assert not runs.skip(KEY, "end-6", "consolidate", "no_model")  # held under a live lease
    runs.finish(claim)
    assert not runs.skip(KEY, "end-6", "consolidate", "no_model")  # done
    assert runs.state(KEY, "end-6", "consolidate") == "done"
    assert runs.skip(KEY, "end-7", "consolidate", "switched_off")  # never claimed
    assert runs.claim(KEY, "end-7", "consolidate", timedelta(minutes=5)) is None  # final


def test_a_dead_letter_leaves_a_run_another_delivery_holds_or_that_has_ended_as_it_is(
    make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    runs = harness_factory(make_settings()).runtime.sessions.runs
    lease = timedelta(minutes=5)
    other = runs.claim(KEY, "end-10", "consolidate", lease)  # a duplicate delivery works on it
    assert other is not None
    assert not runs.end_dead_lettered(
        KEY, "end-10", "consolidate", "version_conflict", letter="m-1", holder="a-lapsed-claim"
    )
    assert runs.holds(other)
    runs.finish(other)
    assert not runs.end_dead_lettered(
        KEY, "end-10", "consolidate", "version_conflict", letter="m-1", holder=other.holder
    )
    assert runs.state(KEY, "end-10", "consolidate") == "done"


def test_a_run_no_message_is_left_to_end_is_abandoned_by_the_sweep(database_url: str) -> None:
    clock = ManualClock()
    engine = create_db_engine(database_url)
    try:
        store = SessionStore(engine, clock=clock)
        lease = timedelta(seconds=30)
        lost = store.runs.claim(KEY, "end-8", "consolidate", lease)  # its worker and message lost
        clock.advance(hours=12)
        waiting = store.runs.claim(KEY, "end-9", "consolidate", lease)  # a retry may still come
        assert lost is not None and waiting is not None
        clock.advance(ABANDONED_AFTER - timedelta(hours=12) + lease + timedelta(seconds=1))
        report = store.apply_retention()
        assert report.runs_abandoned == 1
        states = {r.session_id: (r.state, r.reason) for r in store.run_records(KEY, 7)}
        assert states == {"end-8": ("failed", "abandoned"), "end-9": ("running", None)}
        assert not store.runs.holds(lost)
    finally:
        engine.dispose()
