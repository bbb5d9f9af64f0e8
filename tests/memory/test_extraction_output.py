"""Bad output from the model is bad input too, for extraction: a stand-in model
answering every prompt with well-formed JSON of the wrong shape, or with prose,
gets one quick retry per batch, then the batch's sources end ``failed`` with
the reason — within seconds, visible in the ledger, ``status``, the metrics and
the source listings, and left alone by the sweeper. (A model that is *down*
still leaves sources pending and the job retried: ``test_faults.py``.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from memjobs_client.contracts import owner_key
from memjobs_worker.db.connect import libpq_url
from memjobs_worker.memory.engine import HashingEmbedder, MemoryEngine
from memjobs_worker.memory.engine.extraction_output import parse_facts_reply
from memjobs_worker.memory.engine.turns import stamp_of
from memjobs_worker.memory.store import SourceRecord
from memjobs_worker.model_output import ModelOutputInvalid
from memjobs_worker.ops import status as ops
from memjobs_worker.ops.collectors import LedgerCollector
from tests.support.harness import REPO, Harness, HarnessFactory, MakeSettings, worker_env
from tests.support.ledger import pending_source, remember_now
from tests.support.openai_server import FakeOpenAI, dated_facts_handler, echo_facts_handler, facts_reply
from tests.support.polling import wait_for

OWNER = "lin@example.com"
KEY = owner_key(OWNER)
DIMS = 512
WRONG_SHAPE = json.dumps({"result": "ok", "items": [1, 2]})
PROSE = "Sure! The user talked about moving to Hangzhou."
REASONS = {
    WRONG_SHAPE: "model_output_invalid: the reply has no list 'memory' (after 2 attempts)",
    PROSE: "model_output_invalid: the reply is not JSON (after 2 attempts)",
}


# -- what counts as a usable reply --------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        '{"memory": []}',
        facts_reply("User lives in Hangzhou", "用户不吃香菜"),
        "```json\n" + facts_reply("User lives in Hangzhou") + "\n```",
        "<think>the user said where they live</think>\n" + facts_reply("User lives in Hangzhou"),
        '{"memory": [{"id": "0", "text": "line one\nline two", "attributed_to": "user"}]}',
    ],
)
def test_replies_mem0_uses_as_intended_are_accepted(reply: str) -> None:
    assert isinstance(parse_facts_reply(reply)["memory"], list)


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (PROSE, "the reply is not JSON"),
        ("", "the reply is not JSON"),
        ('["User lives in Hangzhou"]', "the reply is JSON but not an object"),
        (WRONG_SHAPE, "the reply has no list 'memory'"),
        ('{"memory": "User lives in Hangzhou"}', "the reply has no list 'memory'"),
        ('{"memory": ["User lives in Hangzhou"]}', "an item of 'memory' is not an object"),
        ('{"memory": [{"fact": "User lives in Hangzhou"}]}', "an item of 'memory' has no non-empty"),
        ('{"memory": [{"text": "  "}]}', "an item of 'memory' has no non-empty"),
    ],
)
def test_replies_mem0_would_take_for_no_facts_are_refused(reply: str, problem: str) -> None:
    with pytest.raises(ModelOutputInvalid) as caught:
        parse_facts_reply(reply)
    assert str(caught.value).startswith(problem) and "Hangzhou" not in str(caught.value)


# -- mem0 behind the check --------------------------------------------------------------


@pytest.fixture
def mem0_engine(database_url: str, tmp_path: Path, fake_model: FakeOpenAI) -> Iterator[MemoryEngine]:
    from memjobs_worker.memory.engine.mem0_engine import Mem0Engine
    from memjobs_worker.model_client import ChatModel

    chat = ChatModel(
        model="fake-flash", base_url=fake_model.base_url, api_key="test-key", timeout_ms=5000, max_attempts=2
    )
    engine = Mem0Engine(
        database_url=libpq_url(database_url),
        data_dir=tmp_path / "mem0",
        dims=DIMS,
        embedder=HashingEmbedder(DIMS),
        chat=chat,
    )
    yield engine
    engine.close()


def source(text: str) -> SourceRecord:
    return pending_source(KEY, text, datetime.now(UTC))


def test_each_source_reaches_the_model_with_the_day_it_was_said_and_a_fact_keeps_it(
    mem0_engine: MemoryEngine, fake_model: FakeOpenAI
) -> None:
    """A batch of a backlog spans days: each source goes with its own day (a stamp of
    its own is kept, none added), so "yesterday" can be placed; a model that keeps the
    day stores a fact recall can date (``turns.stamp_of``)."""
    fake_model.set_chat_handler(dated_facts_handler)
    older = pending_source(KEY, "I went to Paris yesterday", datetime(2026, 11, 20, 9, 30, tzinfo=UTC))
    own = pending_source(KEY, "[8 May 2023] Caroline: I painted a lake", datetime(2026, 12, 1, tzinfo=UTC))
    mem0_engine.extract(KEY, "a1", [older, own])
    (request,) = fake_model.requests_for("chat")
    sent = request.json["messages"][-1]["content"]
    assert "user: [2026-11-20] I went to Paris yesterday" in sent
    assert "user: [8 May 2023] Caroline: I painted a lake" in sent and "[2026-12-01]" not in sent
    texts = sorted(m.text for m in mem0_engine.list(KEY))
    assert texts == ["[2026-11-20] I went to Paris yesterday", "[8 May 2023] Caroline: I painted a lake"]
    assert {stamp_of(t) for t in texts} == {date(2023, 5, 8), date(2026, 11, 20)}


@pytest.mark.parametrize("answer", [WRONG_SHAPE, PROSE], ids=["wrong-shape", "prose"])
def test_mem0_raises_model_output_invalid_after_one_quick_retry(
    mem0_engine: MemoryEngine, fake_model: FakeOpenAI, answer: str
) -> None:
    fake_model.set_chat_handler(lambda request: answer)
    with pytest.raises(ModelOutputInvalid) as caught:
        mem0_engine.extract(KEY, "a1", [source("I moved to Hangzhou")])
    assert f"{caught.value.reason}: {caught.value}" == REASONS[answer]
    requests = fake_model.requests_for("chat")
    assert len(requests) == 2
    reminder = requests[1].json["messages"][-1]
    assert reminder["role"] == "user" and '{"memory": [{"text"' in reminder["content"]
    assert answer not in json.dumps(requests[1].json)  # the bad reply is not sent back
    assert mem0_engine.list(KEY) == []


def test_mem0_learns_from_the_retry_when_the_second_reply_is_good(
    mem0_engine: MemoryEngine, fake_model: FakeOpenAI
) -> None:
    fake_model.queue_chat_replies(PROSE, "```json\n" + facts_reply("User moved to Hangzhou") + "\n```")
    produced = mem0_engine.extract(KEY, "a1", [source("I moved to Hangzhou")])
    assert len(produced) == 1 and len(fake_model.requests_for("chat")) == 2
    assert [m.text for m in mem0_engine.list(KEY)] == ["User moved to Hangzhou"]


def test_mem0_takes_an_empty_memory_list_for_no_facts_in_one_call(
    mem0_engine: MemoryEngine, fake_model: FakeOpenAI
) -> None:
    fake_model.queue_chat_replies('{"memory": []}')
    assert mem0_engine.extract(KEY, "a1", [source("Good morning!")]) == []
    assert len(fake_model.requests_for("chat")) == 1


# -- end to end: the worker, the ledger, status, metrics, the sweeper ----------------------


def jobs(actor: str, outcome: str) -> float:
    return REGISTRY.get_sample_value("memjobs_jobs_total", {"actor": actor, "outcome": outcome}) or 0.0


def cli(h: Harness, *args: str) -> object:
    done = subprocess.run(
        [sys.executable, "-m", "memjobs_worker.cli.main", *args, "--json"],
        env=worker_env(h.settings),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.mark.parametrize("answer", [WRONG_SHAPE, PROSE], ids=["wrong-shape", "prose"])
def test_malformed_output_fails_each_batch_at_once_with_its_reason(
    model_settings: MakeSettings, harness_factory: HarnessFactory, fake_model: FakeOpenAI, answer: str
) -> None:
    fake_model.set_chat_handler(lambda request: answer)  # every prompt gets the same bad answer
    h = harness_factory(model_settings(extract_batch_size=2, min_backoff_ms=1000, max_backoff_ms=300_000))
    before = jobs("extract_facts", "model_output_invalid")
    retried = jobs("extract_facts", "retried")
    texts = ["I moved to Hangzhou last month", "我不吃香菜", "I take the 7:40 train"]
    ids = [remember_now(h, KEY, t) for t in texts]
    started = time.monotonic()
    h.start_worker()
    h.drain(timeout_s=30)
    elapsed = time.monotonic() - started
    print(
        f"malformed extraction output ({'prose' if answer == PROSE else 'wrong-shape JSON'}): "
        f"{len(ids)} sources failed with their reason {elapsed:.2f} s after the worker started"
    )
    # "Within seconds" is asserted by events, not by the clock (a loaded machine is slow,
    # not wrong): no retry (below), so no backoff of 1 s to 5 min is ever waited for.

    # Two batches (2 + 1 sources), two calls each: one quick retry, then the next batch.
    assert len(fake_model.requests_for("chat")) == 4
    records = {r.source_id: r for r in h.store.list_sources(KEY)}
    assert {sid: (r.state, r.reason) for sid, r in records.items()} == {sid: ("failed", REASONS[answer]) for sid in ids}
    assert [e[3] for e in h.store.attempt_events(KEY)] == ["aborted", "aborted"]
    assert h.pipeline.memories(KEY) == [] and h.pipeline.recall(KEY, "Hangzhou", 5) == []
    assert h.runtime.pipeline.engine.list(KEY) == []  # nothing kept of the attempts

    # The job ended, counted with its reason; nothing retried, nothing dead-lettered.
    wait_for(
        lambda: jobs("extract_facts", "model_output_invalid") > before,
        10,
        "the invalid model output to be counted",
        poll_s=0.02,
    )
    assert jobs("extract_facts", "retried") == retried
    assert h.queues()["memjobs_extract"]["dead"] == 0
    status = ops.status(h.runtime.redis, h.store)
    assert status["sources"] == {"pending": 0, "learned": 0, "forgotten": 0, "failed": 3}
    gauges = {
        tuple(s.labels.values()): s.value
        for family in LedgerCollector(h.store).collect()
        if family.name == "memjobs_ledger_sources"
        for s in family.samples
    }
    assert gauges[("failed",)] == 3 and gauges[("pending",)] == 0

    # Final: the sweeper does not pick them up, and no model call follows.
    assert h.runtime.sweeper.once()["owners_requeued"] == 0
    h.drain(timeout_s=10)
    assert len(fake_model.requests_for("chat")) == 4

    if answer == PROSE:  # the operator's view, once
        listed = cli(h, "sources", "--owner", OWNER)
        assert isinstance(listed, list)
        assert {(r["source_id"], r["state"], r["reason"]) for r in listed} == {
            (sid, "failed", REASONS[PROSE]) for sid in ids
        }
        shown = cli(h, "status")
        assert isinstance(shown, dict) and shown["sources"]["failed"] == 3

    # Remembering a failed source again is another try: with a model that answers, it is learned.
    fake_model.set_chat_handler(echo_facts_handler)
    assert h.client.remember(OWNER, texts[0]) == ids[0]
    h.drain(timeout_s=30)
    after = {r.source_id: (r.state, r.reason) for r in h.store.list_sources(KEY)}
    assert after[ids[0]] == ("learned", None)
    assert [after[sid][0] for sid in ids[1:]] == ["failed", "failed"]
    assert [m.text for m in h.pipeline.memories(KEY)] == [texts[0]]
