"""Knowledge: reindex_knowledge through the producer and a real worker, hybrid
search, idempotent re-indexing, bad input, embedding failures, off means off."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from memjobs_client.contracts import ACTOR_REINDEX, owner_key
from memjobs_client.errors import ConfigurationError, InvalidPayload, SensitiveContent
from memjobs_worker.knowledge.search import search_knowledge
from memjobs_worker.settings import Settings
from tests.support.harness import Harness
from tests.support.knowledge_corpus import DOCS, recall_at
from tests.support.openai_server import FakeOpenAI

OWNER = "reader@example.com"
KEY = owner_key(OWNER)
#: Measured 1.00 with the test embedder (hashed character n-grams, lexical like
#: the keyword ranking): the floor leaves room for ranking changes, not for regressions.
RECALL_AT_5_FLOOR = 0.9


@pytest.fixture
def embedded_settings(make_settings: Callable[..., Settings], fake_model: FakeOpenAI) -> Callable[..., Settings]:
    def make(**overrides: object) -> Settings:
        values: dict[str, object] = {
            "embedding_base_url": fake_model.base_url,
            "embedding_api_key": "k",
            "embedding_dims": 64,
            "knowledge_chunk_chars": 60,
            "knowledge_chunk_overlap_chars": 10,
            "max_retries": 2,
        }
        values.update(overrides)
        return make_settings(**values)

    return make


def corpus(*ids: str, changed: str | None = None) -> list[dict[str, str]]:
    docs = []
    for doc_id in ids or tuple(DOCS):
        title, text = DOCS[doc_id]
        if doc_id == changed:
            text += " 新增一句：记得每周检查一次。"
        docs.append({"doc_id": doc_id, "title": title, "text": text})
    return docs


def ids_found(h: Harness, query: str, k: int) -> list[str]:
    embedder = h.runtime.knowledge_embedder
    outcome = search_knowledge(
        h.runtime.knowledge, KEY, query, k, embed=embedder.embed if embedder is not None else None
    )
    return [r.source.removeprefix("doc:") for r in outcome.results]


def indexed(h: Harness) -> Harness:
    """``h`` with its worker started and the whole corpus indexed for OWNER."""
    h.start_worker()
    h.client.reindex_knowledge(OWNER, corpus(), consent=True)
    h.drain()
    return h


def embed_calls(fake: FakeOpenAI) -> int:
    return len(fake.requests_for("embeddings"))


def test_reindex_requires_consent_and_enqueues_nothing_without_it(
    embedded_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(embedded_settings())
    with pytest.raises(InvalidPayload) as refused:
        h.client.reindex_knowledge(OWNER, corpus("tea"), consent=False)
    assert refused.value.reason == "consent_required"
    assert h.queues()["memjobs_knowledge"]["ready"] == 0


def test_hybrid_search_finds_chinese_and_english_and_marks_results_untrusted(
    embedded_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = indexed(harness_factory(embedded_settings()))
    embedder = h.runtime.knowledge_embedder
    assert embedder is not None  # the embedding settings give one
    outcome = search_knowledge(h.runtime.knowledge, KEY, "花生过敏", 3, embed=embedder.embed)
    assert outcome.mode == "hybrid" and outcome.notice is None
    top = outcome.results[0]
    assert (top.source, top.title, top.trust) == ("doc:allergy", "过敏与饮食", "untrusted_external")
    assert "花生" in top.text
    assert ids_found(h, "brake pads", 3)[0] == "bike"
    recall = recall_at(5, lambda q, k: ids_found(h, q, k))
    assert recall >= RECALL_AT_5_FLOOR, f"recall@5 = {recall:.2f}"


def test_reindexing_an_unchanged_corpus_makes_no_embedding_call_and_a_change_only_its_chunks(
    embedded_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI,
) -> None:
    h = indexed(harness_factory(embedded_settings(knowledge_embed_batch=1000)))
    first = embed_calls(fake_model)
    assert first >= 1
    h.client.reindex_knowledge(OWNER, corpus(), consent=True)
    h.drain()
    assert embed_calls(fake_model) == first  # unchanged: zero calls
    h.client.reindex_knowledge(OWNER, corpus(changed="tea"), consent=True)
    h.drain()
    assert embed_calls(fake_model) == first + 1
    [request] = fake_model.requests_for("embeddings")[first:]
    sent = request.json["input"]
    assert 1 <= len(sent) < 3 and all("乌龙" in t or "检查" in t or "回甘" in t for t in sent)


def test_a_removed_document_leaves_the_index(
    embedded_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(embedded_settings())
    h.start_worker()
    h.client.reindex_knowledge(OWNER, corpus("tea", "cat"), consent=True)
    h.drain()
    h.client.reindex_knowledge(OWNER, corpus("tea"), consent=True)
    h.drain()
    assert [d.doc_id for d in h.runtime.knowledge.documents(KEY)] == ["tea"]
    assert "cat" not in ids_found(h, "猫粮", 5)


def test_bad_files_are_refused_one_by_one_and_the_rest_indexed(
    embedded_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    tmp_path: Path,
) -> None:
    h = harness_factory(embedded_settings(knowledge_max_file_bytes=2000, knowledge_roots=str(tmp_path)))
    root = tmp_path / "notes"
    root.mkdir()
    (root / "good.md").write_text("骑车前检查刹车和轮胎。Check the brakes before riding.", encoding="utf-8")
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (root / "latin1.txt").write_bytes("café crème".encode("latin-1"))
    (root / "empty.txt").write_text("   \n")
    (root / "huge.txt").write_text("x" * 5000)
    (root / ".env").write_text("TOKEN=abc")
    # The producer refuses a path that names a credential file; one that only
    # resolves to one (a symlink) is refused by the worker, document by document.
    (root / "settings.txt").symlink_to(root / ".env")
    (root / "wifi.txt").write_text("my password is hunter2!")
    outside = tmp_path / "outside.txt"
    outside.write_text("not allowed")
    (root / "escape.txt").symlink_to(outside)
    files = sorted(str(p) for p in root.iterdir() if p.name != ".env")
    h.start_worker()
    h.client.reindex_knowledge(OWNER, files, consent=True, allowed_roots=[str(root)])
    h.drain()
    states = {d.title: (d.state, d.reason) for d in h.runtime.knowledge.documents(KEY)}
    assert states["good.md"] == ("indexed", None)
    assert states["image.png"] == ("refused", "binary")
    assert states["latin1.txt"] == ("refused", "undecodable")
    assert states["empty.txt"] == ("refused", "empty")
    assert states["huge.txt"] == ("refused", "too_large")
    assert states["wifi.txt"] == ("refused", "sensitive_content")
    assert states["escape.txt"] == ("refused", "path_not_allowed")
    assert ("refused", "sensitive_path") in states.values()  # settings.txt → .env, its name withheld
    hits = search_knowledge(h.runtime.knowledge, KEY, "刹车", 3, embed=None).results
    assert hits and all(str(tmp_path) not in r.source for r in hits)  # no private path shown


def test_a_path_naming_a_credential_file_is_refused_at_the_producer(
    embedded_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    tmp_path: Path,
) -> None:
    h = harness_factory(embedded_settings())
    (tmp_path / "good.md").write_text("骑车前检查刹车。")
    with pytest.raises(SensitiveContent) as refused:
        h.client.reindex_knowledge(
            OWNER, [str(tmp_path / "good.md"), str(tmp_path / ".env")], consent=True, allowed_roots=[str(tmp_path)]
        )
    assert "documents.1" in str(refused.value) and "environment file" in str(refused.value)
    assert refused.value.rule == "credential_path"
    assert all(count == 0 for stats in h.queues().values() for count in stats.values())


def test_embedding_failures_dead_letter_the_job_and_leave_the_corpus_unchanged(
    embedded_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI,
) -> None:
    # The service down past the outage budget (here none): the counted retry, then the dead letter.
    h = harness_factory(embedded_settings(model_max_attempts=2, max_retries=1, outage_retry_budget_ms=0))
    h.start_worker()
    h.client.reindex_knowledge(OWNER, corpus("tea"), consent=True)
    h.drain()
    before = h.runtime.knowledge.documents(KEY)
    fake_model.fail_next("embeddings", 500, count=100)
    h.client.reindex_knowledge(OWNER, corpus("tea", "cat", changed="tea"), consent=True)
    h.drain()
    assert h.queues()["memjobs_knowledge"]["dead"] == 1
    assert h.runtime.knowledge.documents(KEY) == before  # no half-written corpus


def test_without_an_embedding_service_search_says_so_and_ranks_by_keywords(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI,
) -> None:
    h = indexed(harness_factory(make_settings()))
    outcome = search_knowledge(h.runtime.knowledge, KEY, "灵隐寺", 3, embed=None)
    assert outcome.mode == "keyword" and "no embedding service" in (outcome.notice or "")
    assert outcome.results[0].source == "doc:hangzhou"
    assert fake_model.requests == []  # no text went anywhere


def test_knowledge_off_creates_nothing_and_personal_memory_still_works(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(make_settings(knowledge="off"))
    h.start_worker()
    with pytest.raises(ConfigurationError, match=r"^knowledge is off \(MEMJOBS_KNOWLEDGE=off\)$"):
        h.client.reindex_knowledge(OWNER, corpus("tea"), consent=True)  # refused at the producer
    assert h.queues()["memjobs_knowledge"]["ready"] == 0
    assert ACTOR_REINDEX not in h.broker.actors  # no worker consumes the knowledge queue
    sid = h.client.remember(OWNER, "I keep my notes in Markdown")
    h.drain()
    with h.store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT to_regclass('knowledge_chunks')")).scalar() is None
    assert [r.state for r in h.store.list_sources(KEY) if r.source_id == sid] == ["learned"]


def test_one_reindex_per_owner_at_a_time(
    embedded_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    from memjobs_worker.lease import LeaseLock

    h = harness_factory(embedded_settings(max_retries=1000, max_backoff_ms=100))
    holder = LeaseLock(h.runtime.redis, "reindex", KEY, lease_ms=60_000)
    assert holder.try_acquire() is not None
    h.start_worker()
    h.client.reindex_knowledge(OWNER, corpus("tea"), consent=True)
    h.runtime.knowledge  # noqa: B018 (tables exist, so the check below can read them)
    # While another reindex holds the owner, the job is retried, never run alongside.
    assert not _drained_quickly(h)
    assert h.runtime.knowledge.documents(KEY) == []
    holder.abandon()
    h.drain()
    assert [d.doc_id for d in h.runtime.knowledge.documents(KEY)] == ["tea"]


def _drained_quickly(h: Harness) -> bool:
    from memjobs_worker.ops import status as ops

    return ops.drain(h.runtime.redis, h.store, timeout_s=1.0)


def test_rebuild_restores_the_full_text_index_from_raw_chunks(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = indexed(harness_factory(make_settings()))
    with h.store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE knowledge_chunks SET tokens = '', tsv = NULL"))
    assert search_knowledge(h.runtime.knowledge, KEY, "灵隐寺", 3, embed=None).results == []
    assert h.runtime.knowledge.rebuild_index() > 0
    assert search_knowledge(h.runtime.knowledge, KEY, "灵隐寺", 3, embed=None).results[0].source == "doc:hangzhou"
