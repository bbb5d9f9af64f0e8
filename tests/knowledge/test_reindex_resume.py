"""A reindex attempt that fails midway keeps the vectors it embedded: the retry
embeds only the rest, the corpus is still written all or nothing, and the
cache is emptied (or pruned) so it does not grow."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from memjobs_client.contracts import ReindexKnowledge, owner_key
from memjobs_client.errors import ModelUnavailable
from memjobs_worker.knowledge import KnowledgeStore
from memjobs_worker.knowledge.cache import MAX_AGE, EmbeddingCache
from memjobs_worker.knowledge.reindex import reindex
from memjobs_worker.knowledge.schema import knowledge_chunks, knowledge_embedding_cache
from memjobs_worker.settings import Settings
from tests.support.harness import HarnessFactory, MakeSettings
from tests.support.knowledge_corpus import DOCS
from tests.support.openai_server import FakeOpenAI, embed_text

KEY = owner_key("resume@example.com")
OTHER = owner_key("other@example.com")
DIMS = 32
BATCH = 4


class Embedder:
    """The hashed test embedder, recording every text it is sent; fails its
    ``fail_at``-th call (1-based) as an embedding service that gave up would."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at
        self.calls = 0
        self.texts: list[str] = []

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.calls == self.fail_at:
            raise ModelUnavailable("the embedding service failed")
        self.texts.extend(texts)
        return [embed_text(t, DIMS) for t in texts]


def payload(*ids: str) -> ReindexKnowledge:
    # The documents as a message carries them: pydantic validates each into a KnowledgeText.
    return ReindexKnowledge(
        owner_key=KEY,
        consent=True,
        documents=tuple({"doc_id": d, "title": DOCS[d][0], "text": DOCS[d][1]} for d in ids),  # type: ignore[misc]
    )


def cache_rows(engine: Engine, owner: str) -> int:
    c = knowledge_embedding_cache.c
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).where(c.owner_key == owner)).scalar_one())


def run(engine: Engine, settings: Settings, message: ReindexKnowledge, embed: Embedder) -> None:
    reindex(
        message,
        store=KnowledgeStore(engine),
        embed=embed,
        dims=DIMS,
        knowledge=settings.knowledge,
        cache=EmbeddingCache(engine, "test-hashed", DIMS),
    )


def test_a_retry_embeds_only_what_the_failed_attempt_did_not(engine: Engine, make_settings: MakeSettings) -> None:
    settings = make_settings(knowledge_chunk_chars=60, knowledge_chunk_overlap_chars=10, knowledge_embed_batch=BATCH)
    message = payload(*DOCS)
    store = KnowledgeStore(engine)

    first = Embedder(fail_at=4)  # three batches go through, the fourth call fails
    with pytest.raises(ModelUnavailable):
        run(engine, settings, message, first)
    assert store.documents(KEY) == []  # all or nothing: no document written
    assert len(first.texts) == 3 * BATCH == cache_rows(engine, KEY)

    retry = Embedder()
    run(engine, settings, message, retry)
    with engine.connect() as conn:
        stored = conn.execute(
            sa.select(knowledge_chunks.c.text, knowledge_chunks.c.embedding).where(knowledge_chunks.c.owner_key == KEY)
        ).all()
    distinct = {text for text, _ in stored}
    # The retry embedded exactly the chunks the first attempt had not.
    assert sorted(retry.texts) == sorted(distinct - set(first.texts))
    assert len(retry.texts) == len(distinct) - 3 * BATCH > 0
    print(f"\nretry embedded {len(retry.texts)} of {len(distinct)} distinct chunks")
    # The corpus is complete and every vector is the one its own text gives.
    assert {d.doc_id for d in store.documents(KEY)} == set(DOCS)
    assert all(pytest.approx(embed_text(text, DIMS), abs=1e-6) == list(vec) for text, vec in stored)
    assert cache_rows(engine, KEY) == 0  # written: the cache kept nothing


def test_the_cache_keeps_nothing_for_chunks_no_longer_present_nor_old_attempts(
    engine: Engine, make_settings: MakeSettings
) -> None:
    settings = make_settings(knowledge_chunk_chars=60, knowledge_chunk_overlap_chars=10, knowledge_embed_batch=1)
    with pytest.raises(ModelUnavailable):  # leaves cached vectors of tea and cat
        run(engine, settings, payload("tea", "cat"), Embedder(fail_at=2))
    assert cache_rows(engine, KEY) > 0
    run(engine, settings, payload("bike"), Embedder())  # a whole corpus without them
    assert cache_rows(engine, KEY) == 0

    other = EmbeddingCache(engine, "test-hashed", DIMS)
    other.put(OTHER, {"a" * 64: [1.0] * DIMS})
    assert other.get(KEY, {"a" * 64}) == {}  # one owner's vectors never serve another
    assert other.prune() == 0  # fresh rows stay
    assert other.prune(other.clock() + MAX_AGE + timedelta(minutes=1)) == 1
    assert cache_rows(engine, OTHER) == 0


def test_through_a_worker_the_retry_sends_the_model_only_the_texts_it_still_lacks(
    make_settings: MakeSettings, harness_factory: HarnessFactory, fake_model: FakeOpenAI
) -> None:
    h = harness_factory(
        make_settings(
            embedding_base_url=fake_model.base_url,
            embedding_api_key="k",
            embedding_dims=64,
            knowledge_chunk_chars=60,
            knowledge_chunk_overlap_chars=10,
            knowledge_embed_batch=BATCH,
            model_max_attempts=1,
            max_retries=3,
            min_backoff_ms=10,
            max_backoff_ms=100,
        )
    )
    fake_model.slow_next("embeddings", 0, count=2)  # two batches answered, then the service fails
    fake_model.fail_next("embeddings", 500)
    h.start_worker()
    h.client.reindex_knowledge(
        "resume@example.com",
        [{"doc_id": d, "title": title, "text": text} for d, (title, text) in DOCS.items()],
        consent=True,
    )
    h.drain()
    sent = [r.json["input"] for r in fake_model.requests_for("embeddings")]
    before = [t for batch in sent[:2] for t in batch]
    retry = [t for batch in sent[3:] for t in batch]
    assert len(before) == 2 * BATCH and set(before).isdisjoint(retry)
    assert len(before) + len(retry) == len(set(before) | set(retry)) == 24  # each chunk embedded once
    assert {d.doc_id for d in h.runtime.knowledge.documents(KEY)} == set(DOCS)
    assert h.queues()["memjobs_knowledge"]["dead"] == 0
    assert cache_rows(h.runtime.knowledge.engine, KEY) == 0
