"""The memory-engine contract, run against the in-memory twin and mem0 alike
(mem0 on the test session's pgvector, with the offline embedder, and for
extraction with a model on the fake OpenAI server)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memjobs_client.contracts import owner_key, source_id_for
from memjobs_worker.db.connect import libpq_url
from memjobs_worker.memory.engine import HashingEmbedder, InMemoryEngine, MemoryEngine
from memjobs_worker.memory.store import SourceRecord
from tests.support.ledger import pending_source
from tests.support.openai_server import FakeOpenAI, echo_facts_handler

KEY = owner_key("alice")
OTHER = owner_key("bob")
DIMS = 512
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Subject:
    """An engine under test and how many model calls it has made so far."""

    engine: MemoryEngine
    model_calls: Callable[[], int]


def _mem0(database_url: str, data_dir: Path, chat: object | None) -> MemoryEngine:
    from memjobs_worker.memory.engine.mem0_engine import Mem0Engine

    return Mem0Engine(
        database_url=libpq_url(database_url), data_dir=data_dir, dims=DIMS, embedder=HashingEmbedder(DIMS), chat=chat
    )


def _chat(fake_model: FakeOpenAI) -> object:
    from memjobs_worker.model_client import ChatModel

    return ChatModel(
        model="fake-flash", base_url=fake_model.base_url, api_key="test-key", timeout_ms=5000, max_attempts=2
    )


@pytest.fixture(params=["memory", "mem0"])
def verbatim(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    """Engines without a model: each source is stored as it was said."""
    if request.param == "memory":
        twin = InMemoryEngine(embedder=HashingEmbedder(DIMS))
        yield Subject(twin, twin.model_calls)
        return
    engine = _mem0(request.getfixturevalue("database_url"), tmp_path / "mem0", None)
    yield Subject(engine, lambda: 0)
    engine.close()


@pytest.fixture(params=["memory", "mem0"])
def inferring(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    """Engines with a model that returns each line it was sent as a fact."""
    if request.param == "memory":
        twin = InMemoryEngine(extractor=list, embedder=HashingEmbedder(DIMS))
        yield Subject(twin, twin.model_calls)
        return
    fake_model: FakeOpenAI = request.getfixturevalue("fake_model")
    fake_model.set_chat_handler(echo_facts_handler)
    engine = _mem0(request.getfixturevalue("database_url"), tmp_path / "mem0", _chat(fake_model))
    yield Subject(engine, lambda: len(fake_model.requests_for("chat")))
    engine.close()


def source(text: str | None, key: str = KEY, *, seed: str | None = None) -> SourceRecord:
    return pending_source(key, text, T0, source_id=source_id_for(key, text or seed or "blank"))


def texts(engine: MemoryEngine, key: str = KEY) -> list[str]:
    return sorted(m.text for m in engine.list(key))


def add(engine: MemoryEngine, attempt_id: str, *said: str, key: str = KEY) -> dict[str, str]:
    """Extract verbatim memories; returns text → memory id."""
    batch = [source(t, key) for t in said]
    produced = engine.extract(key, attempt_id, batch)
    by_source = {s.source_id: s.text for s in batch}
    return {str(by_source[p.source_ids[0]]): p.memory_id for p in produced}


# -- extraction ---------------------------------------------------------------------


def test_without_a_model_each_source_becomes_one_verbatim_memory(verbatim: Subject) -> None:
    engine = verbatim.engine
    batch = [source("我对花生过敏。"), source("I live in Hangzhou.")]
    produced = engine.extract(KEY, "a1", batch)
    assert engine.infers is False
    assert sorted(p.source_ids for p in produced) == sorted((s.source_id,) for s in batch)
    assert len({p.memory_id for p in produced}) == 2
    assert texts(engine) == sorted(["我对花生过敏。", "I live in Hangzhou."])
    assert {m.memory_id for m in engine.list(KEY)} == {p.memory_id for p in produced}
    assert verbatim.model_calls() == 0


def test_mem0_stores_a_verbatim_batch_as_mem0_would_store_each_source(database_url: str, tmp_path: Path) -> None:
    """A batch is embedded in one call and inserted in one statement, not one
    ``Memory.add`` a source: its rows must read as mem0's own (the same payload,
    the same vector), or mem0's get_all, deletes and search would miss them."""
    import psycopg

    engine = _mem0(database_url, tmp_path / "mem0", None)
    try:
        batch = [source("我对花生过敏。"), source("I live in Hangzhou."), source("My son plays football.")]
        produced = engine.extract(KEY, "a1", batch)
        first = batch[0]
        theirs = engine.memory.add(  # type: ignore[attr-defined]
            first.text,
            user_id=KEY,
            infer=False,
            metadata={"attempt_id": "a1", "source_id": first.source_id},
        )
        their_id = theirs["results"][0]["id"]
        with psycopg.connect(libpq_url(database_url)) as conn:
            rows = {
                str(r[0]): (r[1], r[2])
                for r in conn.execute(f"SELECT id, payload, vector::text FROM mem0_memories_{DIMS}")
            }
        made = [datetime.fromisoformat(rows[p.memory_id][0]["created_at"]) for p in produced]
        assert made == sorted(made) and len(set(made)) == len(made)  # in order: recall reads neighbours by it
        mine_payload, mine_vector = rows[produced[0].memory_id]
        their_payload, their_vector = rows[their_id]
        for times in ("created_at", "updated_at"):
            assert datetime.fromisoformat(mine_payload.pop(times)) <= datetime.fromisoformat(their_payload.pop(times))
        assert mine_payload == their_payload
        assert mine_vector == their_vector
        assert [p.source_ids for p in produced] == [(s.source_id,) for s in batch]
        assert engine.delete_attempt(KEY, "a1") == 4  # found by mem0's own filter, theirs too
    finally:
        engine.close()


def test_sources_without_text_make_nothing(verbatim: Subject) -> None:
    assert verbatim.engine.extract(KEY, "a1", [source(None, seed="forgotten")]) == []
    assert verbatim.engine.extract(KEY, "a2", []) == []
    assert verbatim.engine.list(KEY) == []


def test_with_a_model_one_call_covers_the_batch_and_every_memory_derives_from_it_all(
    inferring: Subject,
) -> None:
    engine = inferring.engine
    batch = [source("我叫小林"), source("I like green tea"), source("我住在杭州")]
    produced = engine.extract(KEY, "a1", batch)
    assert engine.infers is True
    assert inferring.model_calls() == 1
    assert texts(engine) == sorted(["我叫小林", "I like green tea", "我住在杭州"])
    assert len(produced) == 3
    assert all(sorted(p.source_ids) == sorted(s.source_id for s in batch) for p in produced)
    assert {m.memory_id for m in engine.list(KEY)} == {p.memory_id for p in produced}


def test_with_a_model_a_batch_without_text_calls_no_model(inferring: Subject) -> None:
    assert inferring.engine.extract(KEY, "a1", [source(None, seed="gone")]) == []
    assert inferring.model_calls() == 0


# -- deleting -----------------------------------------------------------------------


def test_delete_removes_the_given_memories_and_ignores_unknown_ids(verbatim: Subject) -> None:
    engine = verbatim.engine
    ids = add(engine, "a1", "I drink coffee", "I walk the dog")
    engine.delete(KEY, [ids["I drink coffee"], "00000000-0000-0000-0000-000000000000"])
    assert texts(engine) == ["I walk the dog"]
    engine.delete(KEY, [ids["I drink coffee"]])  # already gone: ignored
    engine.delete(KEY, [])
    assert texts(engine) == ["I walk the dog"]


def test_delete_attempt_removes_only_that_attempts_memories(verbatim: Subject) -> None:
    engine = verbatim.engine
    add(engine, "crashed", "I play chess", "I play the cello")
    add(engine, "committed", "I learn Go")
    add(engine, "crashed", "bob's chess", key=OTHER)
    assert engine.delete_attempt(KEY, "crashed") == 2
    assert texts(engine) == ["I learn Go"]
    assert texts(engine, OTHER) == ["bob's chess"]
    assert engine.delete_attempt(KEY, "crashed") == 0
    assert engine.delete_attempt(KEY, "never-ran") == 0


# -- reading ------------------------------------------------------------------------


def test_list_and_search_see_only_the_owners_memories(verbatim: Subject) -> None:
    engine = verbatim.engine
    add(engine, "a1", "我喜欢喝咖啡")
    add(engine, "a2", "我也喜欢喝咖啡", key=OTHER)
    assert texts(engine) == ["我喜欢喝咖啡"]
    assert [h.text for h in engine.search(KEY, "咖啡", 5)] == ["我喜欢喝咖啡"]
    assert engine.list(owner_key("nobody")) == []
    assert engine.search(owner_key("nobody"), "咖啡", 5) == []


def test_search_ranks_the_matching_memory_first_and_drops_the_unrelated(
    verbatim: Subject,
) -> None:
    engine = verbatim.engine
    add(engine, "a1", "I drink coffee every morning", "我对花生过敏", "The cat is called Mochi")
    assert [h.text for h in engine.search(KEY, "花生", 5)] == ["我对花生过敏"]
    coffee = engine.search(KEY, "coffee", 5)
    assert coffee[0].text == "I drink coffee every morning"
    assert all(h.score is not None for h in coffee)
    assert engine.search(KEY, "xylophone", 5) == []


def test_search_returns_at_most_the_limit(verbatim: Subject) -> None:
    engine = verbatim.engine
    add(engine, "a1", *[f"I like tea number {n}" for n in range(6)])
    hits = engine.search(KEY, "I like tea", 3)
    assert len(hits) == 3
    assert all(h.text.startswith("I like tea number") for h in hits)
    assert len({h.memory_id for h in hits}) == 3
