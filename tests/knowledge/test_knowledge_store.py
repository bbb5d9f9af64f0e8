"""The knowledge corpus on real PostgreSQL with pgvector: chunking, tokens,
atomic replacement, keyword search that finds Chinese, hostile queries, vector
search, reciprocal rank fusion, index rebuild and concurrent schema creation."""

from __future__ import annotations

import threading
import unicodedata
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import memjobs_worker.knowledge as knowledge
from memjobs_client.errors import InvalidPayload, ModelUnavailable
from memjobs_worker.db import create_db_engine
from memjobs_worker.knowledge import (
    TOKENIZER_VERSION,
    ChunkHit,
    KnowledgeStore,
    StoredChunk,
    chunk_hash,
    chunk_text,
    ensure_schema,
    fuse,
    index_tokens,
    query_tokens,
    search_knowledge,
)
from memjobs_worker.knowledge.search import NO_EMBEDDING_NOTICE

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
ALICE, BOB = "owner-alice", "owner-bob"
ZH = (
    "花生过敏是一种常见的食物过敏。严重时会引起过敏性休克！请随身携带肾上腺素笔；"
    "外出就餐时，要提前告诉服务员。\n孩子在学校也要告知老师、同学和校医。"
)


@pytest.fixture
def store(engine: Engine) -> KnowledgeStore:
    return KnowledgeStore(engine, clock=lambda: T0)


def chunks_of(*texts: str, embeddings: list[list[float] | None] | None = None) -> list[StoredChunk]:
    vectors = embeddings or [None] * len(texts)
    return [StoredChunk(i, t, chunk_hash(t), v) for i, (t, v) in enumerate(zip(texts, vectors, strict=True))]


def put(
    store: KnowledgeStore, owner: str, doc_id: str, *texts: str, embeddings: list[list[float] | None] | None = None
) -> None:
    store.put_document(
        owner, doc_id, f"title {doc_id}", f"doc:{doc_id}", f"hash-{doc_id}", chunks_of(*texts, embeddings=embeddings)
    )


def hit(doc_id: str, index: int = 0) -> ChunkHit:
    return ChunkHit(doc_id, index, f"{doc_id}#{index}", "t", "doc:x", 0.0)


# -- chunking ---------------------------------------------------------------------------


def test_chunk_text_of_empty_or_whitespace_text_is_empty() -> None:
    assert chunk_text("") == [] and chunk_text(" \n\t　") == []


def test_chunk_text_refuses_an_overlap_as_large_as_the_size() -> None:
    with pytest.raises(ValueError, match="must exceed overlap_chars"):
        chunk_text("abc", size_chars=80, overlap_chars=80)


def test_chinese_chunks_end_at_sentence_punctuation() -> None:
    chunks = chunk_text(ZH * 4, size_chars=60, overlap_chars=10)
    assert len(chunks) > 3
    assert all(c.text[-1] in "。！？；\n" for c in chunks[:-1])


def test_consecutive_chunks_overlap_by_at_most_the_given_characters() -> None:
    text = ZH * 4
    chunks = chunk_text(text, size_chars=60, overlap_chars=10)
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert before.start < after.start < before.end
        assert 0 < before.end - after.start <= 10


def _starts_a_cluster(text: str, pos: int) -> bool:
    """An independent check: nothing at ``pos`` attaches to what precedes it."""
    if pos in (0, len(text)):
        return True
    attached = unicodedata.category(text[pos]).startswith("M") or text[pos] == "\u200d"
    return not attached and text[pos - 1] != "\u200d"


def test_chunks_never_split_a_combining_sequence() -> None:
    # No spaces, so every cut is a hard one: e + combining acute, a family emoji
    # joined by ZWJ, a Han character with a variation selector.
    text = "cafe\u0301👨\u200d👩\u200d👧葛\U000e0100" * 40
    chunks = chunk_text(text, size_chars=23, overlap_chars=5)
    assert len(chunks) > 10
    assert all(_starts_a_cluster(text, c.start) and _starts_a_cluster(text, c.end) for c in chunks)


def test_chunks_are_bounded_in_size_and_match_their_offsets() -> None:
    text = (ZH + " The quick brown fox jumps over the lazy dog, again and again. ") * 9
    chunks = chunk_text(text, size_chars=70, overlap_chars=15)
    assert all(0 < len(c.text) <= 70 and text[c.start : c.end] == c.text for c in chunks)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert chunks[0].start == 0 and chunks[-1].end == len(text.rstrip())


def test_chunking_is_deterministic() -> None:
    text = ZH * 7 + "tail words here"
    assert chunk_text(text, size_chars=50, overlap_chars=8) == chunk_text(text, size_chars=50, overlap_chars=8)


def test_chunk_hash_is_the_same_for_composed_and_decomposed_text() -> None:
    assert chunk_hash("café") == chunk_hash("cafe\u0301") != chunk_hash("cafe")


# -- tokens -----------------------------------------------------------------------------


def test_index_tokens_give_every_chinese_character_and_bigram() -> None:
    assert index_tokens("花生过敏") == "花 生 过 敏 花生 生过 过敏"


def test_index_tokens_fold_case_and_width_of_latin_words() -> None:
    assert index_tokens("Peanut ＡＬＬＥＲＧＹ, e-mail 2024") == "peanut allergy e mail 2024"


def test_query_tokens_use_bigrams_for_runs_and_the_character_for_a_single_one() -> None:
    assert query_tokens("花生过敏 和 Peanut peanut") == ["花生", "生过", "过敏", "和", "peanut"]


# -- documents --------------------------------------------------------------------------


def test_put_document_stores_the_document_and_its_chunks(store: KnowledgeStore) -> None:
    store.put_document(ALICE, "d1", "Allergy", "doc:d1", "h1", chunks_of("one", "two"), chars=6)
    [doc] = store.documents(ALICE)
    assert (
        doc.doc_id,
        doc.title,
        doc.source_label,
        doc.content_hash,
        doc.state,
        doc.reason,
        doc.chars,
        doc.chunks,
        doc.updated_at,
    ) == ("d1", "Allergy", "doc:d1", "h1", "indexed", None, 6, 2, T0)


def test_put_document_replaces_every_earlier_chunk(store: KnowledgeStore) -> None:
    put(store, ALICE, "d1", "old apples", "old bananas", "old cherries")
    put(store, ALICE, "d1", "new apples")
    assert [h.text for h in store.keyword_search(ALICE, "apples", 10)] == ["new apples"]
    assert store.keyword_search(ALICE, "cherries", 10) == []


def test_put_document_writes_nothing_when_the_chunk_insert_fails(store: KnowledgeStore, engine: Engine) -> None:
    put(store, ALICE, "d1", "kept apples")

    def fail_on_chunk_insert(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("INSERT INTO knowledge_chunks"):
            raise RuntimeError("injected fault")

    sa.event.listen(engine, "before_cursor_execute", fail_on_chunk_insert)
    with pytest.raises(RuntimeError):
        store.put_document(ALICE, "d1", "new title", "doc:d1", "h2", chunks_of("new pears"))
    sa.event.remove(engine, "before_cursor_execute", fail_on_chunk_insert)
    assert [(d.title, d.content_hash) for d in store.documents(ALICE)] == [("title d1", "hash-d1")]
    assert [h.text for h in store.keyword_search(ALICE, "apples", 10)] == ["kept apples"]


def test_put_document_refuses_a_non_finite_embedding(store: KnowledgeStore) -> None:
    with pytest.raises(InvalidPayload):
        put(store, ALICE, "d1", "text", embeddings=[[1.0, float("nan")]])
    assert store.documents(ALICE) == []


def test_a_refused_new_version_removes_the_old_chunks(store: KnowledgeStore) -> None:
    put(store, ALICE, "d1", "peanut allergy notes")
    store.refuse_document(ALICE, "d1", "notes", "sensitive_content")
    [doc] = store.documents(ALICE)
    assert (doc.state, doc.reason, doc.chunks) == ("refused", "sensitive_content", 0)
    assert store.keyword_search(ALICE, "peanut", 10) == []


def test_remove_documents_except_deletes_the_others_and_counts_them(store: KnowledgeStore) -> None:
    for doc_id in ("a", "b", "c"):
        put(store, ALICE, doc_id, f"shared word {doc_id}")
    put(store, BOB, "b", "shared word bob")
    assert store.remove_documents_except(ALICE, {"b"}) == 2
    assert [d.doc_id for d in store.documents(ALICE)] == ["b"]
    assert [h.doc_id for h in store.keyword_search(ALICE, "shared", 10)] == ["b"]
    assert len(store.documents(BOB)) == 1


def test_chunk_embeddings_returns_vectors_of_the_asked_dims_only(store: KnowledgeStore) -> None:
    put(store, ALICE, "d1", "alpha", "beta", embeddings=[[1.0, 0.0], [0.0, 1.0, 0.0]])
    put(store, BOB, "d1", "gamma", embeddings=[[0.5, 0.5]])
    found = store.chunk_embeddings(ALICE, [chunk_hash("alpha"), chunk_hash("beta"), chunk_hash("gamma")], 2)
    assert found == {chunk_hash("alpha"): [1.0, 0.0]}


# -- keyword search ---------------------------------------------------------------------


def test_keyword_search_finds_chinese_by_a_two_character_word(store: KnowledgeStore) -> None:
    put(store, ALICE, "zh", *[c.text for c in chunk_text(ZH, size_chars=40, overlap_chars=5)])
    put(store, ALICE, "other", "今天天气很好，我们去公园散步。")
    hits = store.keyword_search(ALICE, "校医", 10)
    assert [h.doc_id for h in hits] == ["zh"] and "校医" in hits[0].text and hits[0].rank > 0


def test_keyword_search_finds_english_by_a_word_whatever_its_case(store: KnowledgeStore) -> None:
    put(store, ALICE, "en", "Carry an EpiPen at all times.", "Tell the waiter.")
    assert [h.text for h in store.keyword_search(ALICE, "epipen", 10)] == ["Carry an EpiPen at all times."]


def test_keyword_search_never_returns_another_owners_chunks(store: KnowledgeStore) -> None:
    put(store, ALICE, "d1", "花生过敏 peanut")
    put(store, BOB, "d1", "花生过敏 peanut")
    for query in ("过敏", "peanut", "p"):
        assert {h.text for h in store.keyword_search(BOB, query, 10)} == {"花生过敏 peanut"}
    assert store.keyword_search("owner-carol", "过敏", 10) == []


HOSTILE = [
    "a & b | !(c",
    "peanut & !(",
    "':*",
    "<->",
    "%",
    "_",
    "\\",
    "'; DROP TABLE x; --",
    '"',
    "x" * 100_000,
    "花" * 5000,
    "a",
    "\x00",
    "\ud800",
    "!!!",
    ")(",
    "&|!",
    "   ",
]


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_queries_never_raise(store: KnowledgeStore, query: str) -> None:
    put(store, ALICE, "d1", "peanut allergy 花生", "100% sure a_b c\\d")
    assert isinstance(store.keyword_search(ALICE, query, 5), list)


def test_tsquery_operators_in_a_query_are_ignored_as_syntax(store: KnowledgeStore) -> None:
    put(store, ALICE, "d1", "peanut allergy")
    assert [h.doc_id for h in store.keyword_search(ALICE, "peanut & !(allergy |", 5)] == ["d1"]


def test_percent_and_underscore_match_only_themselves_in_the_fallback(store: KnowledgeStore) -> None:
    put(store, ALICE, "d1", "100% sure", "a_b", "plain words", "back\\slash")
    assert [h.text for h in store.keyword_search(ALICE, "%", 10)] == ["100% sure"]
    assert [h.text for h in store.keyword_search(ALICE, "_", 10)] == ["a_b"]
    assert [h.text for h in store.keyword_search(ALICE, "\\", 10)] == ["back\\slash"]


def test_one_latin_character_falls_back_to_a_bounded_substring_search(store: KnowledgeStore) -> None:
    put(store, ALICE, "d1", *[f"xylophone {i}" for i in range(8)])
    put(store, BOB, "d1", "xylophone")
    hits = store.keyword_search(ALICE, "x", 3)
    # Full-text search would not find "x" inside a word: this is the fallback.
    assert len(hits) == 3 and all(h.rank == 0.0 and h.text.startswith("xylophone") for h in hits)


# -- vector search and fusion -----------------------------------------------------------


def test_vector_search_orders_by_cosine_similarity(store: KnowledgeStore) -> None:
    put(store, ALICE, "d1", "east", "north", "north-east", embeddings=[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    hits = store.vector_search(ALICE, [1.0, 0.1], 3)
    assert [h.text for h in hits] == ["east", "north-east", "north"]
    assert hits[0].rank == pytest.approx(0.995, abs=1e-3)


def test_vector_search_skips_other_dims_other_owners_and_zero_vectors(store: KnowledgeStore) -> None:
    put(store, ALICE, "d1", "two", "three", "zero", embeddings=[[1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0]])
    put(store, BOB, "d1", "bob", embeddings=[[1.0, 0.0]])
    assert [h.text for h in store.vector_search(ALICE, [1.0, 0.0], 10)] == ["two"]
    assert store.vector_search(ALICE, [0.0, 0.0], 10) == []


def test_fuse_prefers_a_chunk_ranked_well_in_both_lists() -> None:
    keyword = [hit("a"), hit("both"), hit("c")]
    vector = [hit("d"), hit("both"), hit("e")]
    fused = fuse([keyword, vector])
    assert [h.doc_id for h, _ in fused][:3] == ["both", "a", "d"]
    assert fused[0][1] == pytest.approx(2 / 62)


def test_search_without_an_embedder_ranks_by_keywords_and_says_so(store: KnowledgeStore) -> None:
    put(store, ALICE, "d1", "peanut allergy")
    outcome = search_knowledge(store, ALICE, "peanut", 5, embed=None)
    assert (outcome.mode, outcome.notice) == ("keyword", NO_EMBEDDING_NOTICE)
    [result] = outcome.results
    assert (result.text, result.title, result.source, result.trust) == (
        "peanut allergy",
        "title d1",
        "doc:d1",
        "untrusted_external",
    )


def test_hybrid_search_ranks_first_the_chunk_both_rankings_like(store: KnowledgeStore) -> None:
    put(
        store,
        ALICE,
        "d1",
        "peanut butter recipe",
        "peanut allergy card",
        "emergency plan",
        "first aid kit",
        embeddings=[[0.0, 1.0], [1.0, 0.0], [0.9, 0.1], [0.8, 0.2]],
    )
    by_keywords = search_knowledge(store, ALICE, "peanut", 2, embed=None, all_chunks=True)
    assert [r.text for r in by_keywords.results] == ["peanut butter recipe", "peanut allergy card"]
    outcome = search_knowledge(store, ALICE, "peanut", 2, embed=lambda q: [1.0, 0.0], all_chunks=True)
    assert (outcome.mode, outcome.notice) == ("hybrid", None)
    # keywords: butter 1st, card 2nd; vectors: card 1st, butter last: card wins.
    assert [r.text for r in outcome.results] == ["peanut allergy card", "peanut butter recipe"]
    # By default one result per document: its chunk that the fused chunk ranking likes best.
    [one] = search_knowledge(store, ALICE, "peanut", 2, embed=lambda q: [1.0, 0.0]).results
    assert one.text == "peanut allergy card"


def test_one_result_per_document_lets_a_short_note_past_a_long_document(store: KnowledgeStore) -> None:
    put(store, ALICE, "long", *[f"the bike and the chain, part {i}" for i in range(8)])
    put(store, ALICE, "note", "lubricate the bike chain every two weeks")
    collapsed = search_knowledge(store, ALICE, "lubricate bike chain", 2, embed=None).results
    assert [r.source for r in collapsed] == ["doc:note", "doc:long"]  # rarer words win, one hit each
    chunks = search_knowledge(store, ALICE, "bike chain", 3, embed=None, all_chunks=True).results
    assert len(chunks) == 3 and sum(r.source == "doc:long" for r in chunks) >= 2


def test_english_stop_words_neither_match_nor_weigh_and_words_are_stemmed(store: KnowledgeStore) -> None:
    put(store, ALICE, "diary", " ".join(["the day went on and on to the end of it"] * 20))
    put(store, ALICE, "note", "Lubricated the chain on Sunday")
    assert store.keyword_search(ALICE, "the", 5) == []  # only a stop word: nothing to look for
    hits = search_knowledge(store, ALICE, "when did I lubricate the chain on the bike", 5, embed=None)
    assert [r.source for r in hits.results] == ["doc:note"]  # "lubricate" finds "Lubricated"


def test_search_falls_back_to_keywords_when_the_embedder_fails(store: KnowledgeStore) -> None:
    put(store, ALICE, "d1", "peanut allergy")

    def broken(query: str) -> list[float]:
        raise ModelUnavailable("503")

    outcome = search_knowledge(store, ALICE, "peanut", 5, embed=broken)
    assert outcome.mode == "keyword" and [r.text for r in outcome.results] == ["peanut allergy"]


# -- the index --------------------------------------------------------------------------


def test_rebuild_index_restores_search_after_tokens_are_corrupted(store: KnowledgeStore, engine: Engine) -> None:
    put(store, ALICE, "d1", "花生过敏 peanut")
    put(store, BOB, "d2", "肾上腺素 epipen")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE knowledge_chunks SET tokens = 'garbage', tsv = to_tsvector('simple', 'garbage')"))
    assert store.keyword_search(ALICE, "过敏", 5) == []
    assert store.rebuild_index() == 2
    assert [h.doc_id for h in store.keyword_search(ALICE, "过敏", 5)] == ["d1"]
    assert [h.doc_id for h in store.keyword_search(BOB, "epipen", 5)] == ["d2"]


def test_index_is_stale_when_the_stored_tokenizer_version_differs(store: KnowledgeStore, engine: Engine) -> None:
    put(store, ALICE, "d1", "peanut")
    assert not store.index_is_stale()
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE knowledge_meta SET value = :v"), {"v": str(TOKENIZER_VERSION - 1)})
    assert store.index_is_stale()
    store.rebuild_index()
    assert not store.index_is_stale()


def test_index_is_stale_when_a_chunk_has_no_tsvector(store: KnowledgeStore, engine: Engine) -> None:
    put(store, ALICE, "d1", "peanut")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE knowledge_chunks SET tsv = NULL"))
    assert store.index_is_stale()


def test_ensure_schema_runs_twice_at_once(database_url: str) -> None:
    engine = create_db_engine(database_url)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            barrier.wait()
            ensure_schema(engine)
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ensure_schema(engine)  # and once more, after: still idempotent
    assert errors == []
    assert KnowledgeStore(engine).documents(ALICE) == []
    engine.dispose()


def test_knowledge_all_lists_names_that_exist() -> None:
    assert len(knowledge.__all__) == len(set(knowledge.__all__))
    assert [n for n in knowledge.__all__ if not hasattr(knowledge, n)] == []
