"""A secret in any text field of any job: refused at the producer, and refused by
the worker when written into Redis by hand, with nothing kept in Redis, the
ledger, the Markdown memory, the knowledge index or the logs, and nothing sent
to the model stand-in.  A task's goal keeps its words, with the secret blanked.

Real Redis, PostgreSQL and the fake model server; the worker runs in-process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dramatiq
import psycopg
import pytest
from prometheus_client import REGISTRY

from memjobs_client import contracts
from memjobs_client.contracts import QUEUE_OF, QUEUES, owner_key, source_id_for
from memjobs_client.errors import SensitiveContent
from memjobs_worker.logs import JsonFormatter
from memjobs_worker.settings import Settings
from tests.support.harness import Harness
from tests.support.openai_server import FakeOpenAI
from tests.support.redis_values import as_bytes

OWNER = "carol@example.com"
KEY = owner_key(OWNER)
# Fake credentials, assembled so that this file does not look like a leak itself.
TOKEN = "ghp_" + "Zq9Xv3Lm7Np2Rt6Ks1Jd8Hf4Gb5Wc0Ye2Ua"
PASSWORD = "Hunt3r-" + "2026!x"
SENTENCE = f"my password is {PASSWORD}"
TS = "2026-11-30T10:00:00Z"
TURNS = [{"role": "user", "text": "set an alarm for seven", "ts": TS}]


@pytest.fixture
def h(
    make_settings: Callable[..., Settings], fake_model: FakeOpenAI, harness_factory: Callable[[Settings], Harness]
) -> Harness:
    """Every feature on: memory, consolidation, digest, knowledge with embeddings."""
    return harness_factory(
        make_settings(
            memory_base_url=fake_model.base_url,
            memory_api_key="test-key",
            memory_model="fake-flash",
            session_digest="on",
            embedding_base_url=fake_model.base_url,
            embedding_api_key="k",
            embedding_dims=64,
            max_retries=1,
        )
    )


def secret_of(case: str) -> str:
    return PASSWORD if case.endswith("_text") or case.endswith("_title") else TOKEN


PRODUCER_CASES: dict[str, Callable[[Any], Any]] = {
    "remember_text": lambda c: c.remember(OWNER, SENTENCE),
    "remember_session_id": lambda c: c.remember(OWNER, "I like tea", session_id=TOKEN),
    "end_session_session_id": lambda c: c.end_session(OWNER, TOKEN, TURNS),
    "end_session_task_id": lambda c: c.end_session(OWNER, "s1", TURNS, [{"task_id": TOKEN, "goal": "tea"}]),
    "record_task_task_id": lambda c: c.record_task(OWNER, TOKEN, "buy tea", "running"),
    "reindex_doc_text": lambda c: c.reindex_knowledge(
        OWNER, [{"doc_id": "d1", "title": "notes", "text": SENTENCE}], consent=True
    ),
    "reindex_doc_title": lambda c: c.reindex_knowledge(
        OWNER, [{"doc_id": "d1", "title": SENTENCE, "text": "tea notes"}], consent=True
    ),
    "reindex_doc_id": lambda c: c.reindex_knowledge(
        OWNER, [{"doc_id": TOKEN, "title": "notes", "text": "tea notes"}], consent=True
    ),
    "reindex_path_with_token": lambda c: c.reindex_knowledge(OWNER, [f"/srv/docs/{TOKEN}.md"], consent=True),
    "reindex_credential_file": lambda c: c.reindex_knowledge(OWNER, ["/home/carol/.ssh/id_ed25519"], consent=True),
}


@pytest.mark.parametrize("case", list(PRODUCER_CASES), ids=list(PRODUCER_CASES))
def test_producer_refuses_a_secret_in_every_field_and_enqueues_nothing(case: str, h: Harness) -> None:
    with pytest.raises(SensitiveContent) as refused:
        PRODUCER_CASES[case](h.client)
    assert refused.value.reason == "sensitive_content"
    assert "credential" in str(refused.value)
    assert TOKEN not in str(refused.value) and PASSWORD not in str(refused.value)
    assert all(count == 0 for stats in h.queues().values() for count in stats.values()), h.queues()


def test_producer_blanks_a_secret_out_of_a_task_goal_and_keeps_its_words(h: Harness) -> None:
    h.client.record_task(OWNER, "t1", f"log in to the bank, {SENTENCE}, and pay rent", "running")
    [raw] = h.runtime.redis.hvals(f"memjobs:{QUEUE_OF[contracts.ACTOR_RECORD_TASK]}.msgs")
    goal = dramatiq.Message.decode(as_bytes(raw)).args[0]["goal"]
    assert PASSWORD not in goal
    assert goal.startswith("log in to the bank") and goal.endswith("and pay rent")


def _crafted(case: str) -> tuple[str, dict[str, Any]]:
    """A message the producer would have refused, as if written into Redis by hand."""
    base = {"schema_version": 1, "owner_key": KEY}
    session = {**base, "session_id": "s1", "transcript": TURNS}
    doc = {"doc_id": "d1", "title": "notes", "text": "tea notes"}
    table: dict[str, tuple[str, dict[str, Any]]] = {
        "remember_text": (
            contracts.ACTOR_REMEMBER,
            {**base, "source_id": source_id_for(KEY, SENTENCE), "text": SENTENCE},
        ),
        "remember_session_id": (
            contracts.ACTOR_REMEMBER,
            {**base, "source_id": source_id_for(KEY, "tea"), "text": "tea", "session_id": TOKEN},
        ),
        "consolidate_session_id": (contracts.ACTOR_CONSOLIDATE, {**session, "session_id": TOKEN}),
        "digest_session_id": (contracts.ACTOR_DIGEST, {**session, "session_id": TOKEN}),
        "digest_task_id": (contracts.ACTOR_DIGEST, {**session, "tasks": [{"task_id": TOKEN, "goal": "x"}]}),
        "record_task_id": (contracts.ACTOR_RECORD_TASK, {**base, "task_id": TOKEN, "goal": "tea", "status": "running"}),
        "reindex_doc_text": (
            contracts.ACTOR_REINDEX,
            {**base, "consent": True, "documents": [{**doc, "text": SENTENCE}]},
        ),
        "reindex_doc_title": (
            contracts.ACTOR_REINDEX,
            {**base, "consent": True, "documents": [{**doc, "title": SENTENCE}]},
        ),
        "reindex_doc_id": (contracts.ACTOR_REINDEX, {**base, "consent": True, "documents": [{**doc, "doc_id": TOKEN}]}),
        "reindex_path": (
            contracts.ACTOR_REINDEX,
            {**base, "consent": True, "documents": [{"path": f"/srv/docs/{TOKEN}.md"}]},
        ),
        "unknown_field": (contracts.ACTOR_FORGET, {**base, "source_id": source_id_for(KEY, "tea"), "note": SENTENCE}),
    }
    return table[case]


CRAFTED = [
    "remember_text",
    "remember_session_id",
    "consolidate_session_id",
    "digest_session_id",
    "digest_task_id",
    "record_task_id",
    "reindex_doc_text",
    "reindex_doc_title",
    "reindex_doc_id",
    "reindex_path",
    "unknown_field",
]


def _database_rows_holding(settings: Settings, needle: str) -> list[str]:
    """Every table of the test database with a row whose text holds ``needle``."""
    assert settings.database.url
    found = []
    with psycopg.connect(settings.database.url) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()]
        for table in tables:
            rows = conn.execute(f'SELECT t::text FROM "{table}" t').fetchall()  # noqa: S608 - our own table names
            if any(needle in row[0] for row in rows):
                found.append(table)
    return found


def _files_holding(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def _refused() -> float:
    return REGISTRY.get_sample_value("memjobs_refused_total", {"reason": "sensitive_content"}) or 0.0


@pytest.mark.parametrize("case", CRAFTED, ids=CRAFTED)
def test_worker_refuses_a_crafted_secret_and_keeps_it_nowhere(
    case: str, h: Harness, fake_model: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = secret_of(case) if case != "unknown_field" else PASSWORD
    actor, payload = _crafted(case)
    before = _refused()
    h.broker.enqueue(
        dramatiq.Message(queue_name=QUEUE_OF[actor], actor_name=actor, args=(payload,), kwargs={}, options={})
    )
    h.start_worker()
    h.drain()
    assert _refused() == before + 1
    assert {q: s["dead"] for q, s in h.queues().items()} == {q: 0 for q in QUEUES}  # acknowledged
    assert [k for k in h.runtime.redis.scan_iter() if secret.encode() in (h.runtime.redis.dump(k) or b"")] == []
    assert _database_rows_holding(h.settings, secret) == []
    assert _files_holding(Path(h.settings.data_dir), secret) == []
    assert not any(secret in r.body_text for r in fake_model.requests)
    formatter = JsonFormatter()  # what the worker writes, at DEBUG even
    assert all(secret not in formatter.format(record) for record in caplog.records)


def test_worker_blanks_a_crafted_secret_out_of_a_task_goal(h: Harness) -> None:
    goal = f"call the bank, {SENTENCE}, then pay rent"
    payload = {"schema_version": 1, "owner_key": KEY, "task_id": "t1", "goal": goal, "status": "running"}
    h.broker.enqueue(
        dramatiq.Message(
            queue_name=QUEUE_OF[contracts.ACTOR_RECORD_TASK],
            actor_name=contracts.ACTOR_RECORD_TASK,
            args=(payload,),
            kwargs={},
            options={},
        )
    )
    h.start_worker()
    h.drain()
    assert _database_rows_holding(h.settings, PASSWORD) == []
    assert _database_rows_holding(h.settings, "then pay rent") != []  # the goal kept its words
