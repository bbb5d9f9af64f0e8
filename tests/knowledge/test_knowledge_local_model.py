"""Knowledge on the embedded default's local model (issue 24): questions asked in
the other language, sharing no word with their note, are found by the fused
ranking where keywords alone miss them, and the notes' own questions stay first;
a corpus indexed by keywords alone is refused in words until ``memjobs reembed``
gives its chunks vectors. Real Redis, PostgreSQL and worker; multilingual-e5-small
in process (no model service)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from memjobs_client.contracts import owner_key
from memjobs_worker.db import create_db_engine
from memjobs_worker.embedding.local import MODEL_ID
from memjobs_worker.knowledge.chunking import chunk_hash
from memjobs_worker.knowledge.records import ChunkHit
from memjobs_worker.knowledge.schema import ensure_schema
from memjobs_worker.knowledge.search import fuse_documents, scored, search_knowledge, search_with
from memjobs_worker.knowledge.store import KnowledgeStore, StoredChunk
from memjobs_worker.knowledge.vectors import ChunksWithoutVectors
from memjobs_worker.ops.reembed import pending, reembed
from memjobs_worker.ranking import MIN_SHOULD_MATCH
from memjobs_worker.settings import Settings
from tests.support.harness import Harness
from tests.support.knowledge_corpus import CROSSLINGUAL_QUERIES, DOCS, QUERIES, top_k_share

OWNER = "local-model@example.com"
KEY = owner_key(OWNER)


def index_notes(h: Harness) -> None:
    h.start_worker()
    h.client.reindex_knowledge(
        OWNER, [{"doc_id": d, "title": t, "text": x} for d, (t, x) in DOCS.items()], consent=True
    )
    h.drain()
    h.stop_worker()


def finder(h: Harness) -> Callable[[str, int], list[str]]:
    def found(query: str, k: int) -> list[str]:
        return [
            r.source.removeprefix("doc:")
            for r in search_with(h.runtime.knowledge, h.runtime.knowledge_embedder, KEY, query, k).results
        ]

    return found


def test_cross_lingual_questions_are_found_where_keywords_miss(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    h = harness_factory(make_settings(memory_provider="off", local_embedder="e5"))
    index_notes(h)
    assert search_with(h.runtime.knowledge, h.runtime.knowledge_embedder, KEY, "花生过敏", 1).mode == "hybrid"
    found = finder(h)

    def keywords(query: str, k: int) -> list[str]:
        outcome = search_knowledge(h.runtime.knowledge, KEY, query, k, embed=None)
        return [r.source.removeprefix("doc:") for r in outcome.results]

    # Keywords alone: nothing shared, nothing found (measured 0 of 12 in the top 3).
    assert top_k_share(3, CROSSLINGUAL_QUERIES, keywords) <= 1 / len(CROSSLINGUAL_QUERIES)
    # Fused with the local model (measured: top-1 10 of 12, top-3 12 of 12).
    top1, top3 = (top_k_share(n, CROSSLINGUAL_QUERIES, found) for n in (1, 3))
    assert top3 >= 11 / 12 and top1 >= 0.75, (top1, top3)
    # The notes' own questions stay first (keywords alone: 16 of 16).
    assert top_k_share(1, QUERIES, found) == 1.0


def test_a_corpus_indexed_by_keywords_is_refused_until_reembedded(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    before = make_settings(memory_provider="off", local_embedder="hashing")
    index_notes(harness_factory(before))  # the hashed embedder: knowledge by keywords alone, no vectors
    settings = make_settings(memory_provider="off", local_embedder="e5")
    assert settings.database.url
    left = pending(settings.embedding, settings.memory, settings.knowledge, settings.database.url)
    assert left.bare_chunks >= len(DOCS) and left.required  # `memjobs up` re-embeds before its workers

    h = harness_factory(settings)
    with pytest.raises(ChunksWithoutVectors) as refused:
        search_with(h.runtime.knowledge, h.runtime.knowledge_embedder, KEY, "What am I allergic to?", 3)
    assert f"{left.bare_chunks} stored knowledge chunks have no vector" in str(refused.value)
    assert "memjobs reembed" in str(refused.value) and MODEL_ID in str(refused.value)

    assert reembed(settings.model, settings.embedding, settings.memory, settings.knowledge, settings.database.url) == (
        0,
        left.bare_chunks,
    )
    assert not pending(settings.embedding, settings.memory, settings.knowledge, settings.database.url).required
    assert finder(h)("What am I allergic to?", 3)[:1] == ["allergy"]


def test_fused_with_vectors_the_keyword_ranking_keeps_chunks_holding_half_the_query(database_url: str) -> None:
    engine = create_db_engine(database_url)
    try:
        ensure_schema(engine)
        store = KnowledgeStore(engine)
        texts = {
            "plan": "The migration project: status every Wednesday.",
            "diary": "The status of the weather, the status of the trains, the status of my mood.",
            "fruit": "Apples and pears.",
            "tea": "Oolong wants hot water.",
        }
        for doc, text in texts.items():
            store.put_document(KEY, doc, doc, f"doc:{doc}", doc, [StoredChunk(0, text, chunk_hash(text), None)])
        query = "migration project status"
        assert {h.doc_id for h in store.keyword_search(KEY, query, 10)} == {"plan", "diary"}
        # "status" alone is far from half of the query's weight (two rarer words besides).
        gated = store.keyword_search(KEY, query, 10, min_should_match=MIN_SHOULD_MATCH)
        assert [h.doc_id for h in gated] == ["plan"]
        # A stop word weighs nothing, and a word no chunk holds as much as the rarest held word.
        assert [h.doc_id for h in store.keyword_search(KEY, "the oolong", 10, min_should_match=0.5)] == ["tea"]
        assert store.keyword_search(KEY, "oolong zeppelin", 10, min_should_match=0.51) == []
        assert [h.doc_id for h in store.keyword_search(KEY, "oolong zeppelin", 10, min_should_match=0.5)] == ["tea"]
    finally:
        engine.dispose()


def test_a_result_first_by_every_ranking_scores_one_and_the_rest_read_against_it(database_url: str) -> None:
    """Scores a reader can take in: the best possible result reads 1 (an RRF sum reads
    2/61 = 0.033), first in one of two rankings and absent from the other 0.5."""
    engine = create_db_engine(database_url)
    try:
        ensure_schema(engine)
        store = KnowledgeStore(engine)
        texts = {"tea": "Oolong wants hot water.", "fruit": "Apples and pears.", "trains": "The trains run late."}
        for doc, text in texts.items():
            store.put_document(KEY, doc, doc, f"doc:{doc}", doc, [StoredChunk(0, text, chunk_hash(text), None)])
        (only,) = search_knowledge(store, KEY, "oolong", 5, embed=None).results
        assert only.source == "doc:tea" and only.score == pytest.approx(1.0)

        def hit(doc: str) -> ChunkHit:
            return ChunkHit(doc, 0, texts[doc], doc, f"doc:{doc}", 0.0)

        keyword, nearest = [hit("tea")], [hit("tea"), hit("fruit")]
        fused = {h.source: h.score for h in scored(fuse_documents([keyword, nearest]), 5, 2)}
        assert fused == {"doc:tea": pytest.approx(1.0), "doc:fruit": pytest.approx(61 / 62 / 2)}
        lone = {h.source: h.score for h in scored(fuse_documents([[hit("trains")], [hit("fruit")]]), 5, 2)}
        assert lone == {"doc:trains": pytest.approx(0.5), "doc:fruit": pytest.approx(0.5)}
    finally:
        engine.dispose()
