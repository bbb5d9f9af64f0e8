"""Knowledge's vectors and the model that made them (issue 24): a change of
embedding model at the same size is refused in words that name the fix, and
``reembed_knowledge`` clears the old vectors (keywords still find every chunk)
and embeds again, resumably. Real PostgreSQL; the embedding service is the
stand-in, under two model names."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from memjobs_client.contracts import ReindexKnowledge, owner_key
from memjobs_worker.embedding.record import EmbeddingModelChanged
from memjobs_worker.knowledge.reindex import reindex
from memjobs_worker.knowledge.search import search_knowledge
from memjobs_worker.knowledge.store import KnowledgeStore
from memjobs_worker.knowledge.vectors import (
    ChunksWithoutVectors,
    check_knowledge_vectors,
    chunks_to_reembed,
    reembed_knowledge,
)
from memjobs_worker.model_client import RemoteEmbedder
from memjobs_worker.settings import DatabaseSettings, KnowledgeSettings, RedisSettings, Settings
from tests.support.knowledge_corpus import DOCS
from tests.support.openai_server import FakeOpenAI

KEY = owner_key("reembed@example.com")
DIMS = 64


def embedder(fake: FakeOpenAI, model: str) -> RemoteEmbedder:
    return RemoteEmbedder(base_url=fake.base_url, api_key="k", model=model, dims=DIMS, timeout_ms=5000, max_attempts=1)


def vectors(engine: Engine) -> tuple[int, int]:
    """(chunks with a vector, chunks without)."""
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT count(embedding), count(*) - count(embedding) FROM knowledge_chunks")).one()
    return int(row[0]), int(row[1])


def test_another_model_is_refused_then_reembedded_resumably(
    engine: Engine,
    fake_model: FakeOpenAI,
    tmp_path: Any,
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        redis=RedisSettings(url="redis://unused"),
        database=DatabaseSettings(url="postgresql://unused"),
        knowledge=KnowledgeSettings(chunk_chars=60, chunk_overlap_chars=10),
    )
    store = KnowledgeStore(engine)
    old = embedder(fake_model, "model-a")
    check_knowledge_vectors(engine, "service:model-a", DIMS)
    payload = ReindexKnowledge.model_validate(
        {
            "owner_key": KEY,
            "consent": True,
            "documents": [{"doc_id": d, "title": t, "text": x} for d, (t, x) in DOCS.items()],
        }
    )
    reindex(payload, store=store, embed=old.embed_batch, dims=DIMS, knowledge=settings.knowledge)
    embedded, _ = vectors(engine)
    assert embedded > 4

    with pytest.raises(EmbeddingModelChanged) as refused:
        check_knowledge_vectors(engine, "service:model-b", DIMS)
    assert f"{embedded} stored knowledge chunks were embedded by service:model-a (64 dimensions)" in str(refused.value)
    assert "memjobs reembed" in str(refused.value)
    assert chunks_to_reembed(engine, "service:model-b", DIMS, semantic=True) == embedded

    new = embedder(fake_model, "model-b")
    calls: list[int] = []

    def failing(texts: list[str]) -> list[list[float]]:
        calls.append(len(texts))
        if len(calls) > 1:
            raise ConnectionError("interrupted")
        return new.embed_batch(texts)

    with pytest.raises(ConnectionError):
        reembed_knowledge(engine, failing, "service:model-b", DIMS, batch=2)
    assert vectors(engine) == (2, embedded - 2)  # the old model's vectors are gone, two new ones
    with pytest.raises(ChunksWithoutVectors):  # no other model's vector left, but chunks without one
        check_knowledge_vectors(engine, "service:model-b", DIMS)
    keywords = search_knowledge(store, KEY, "花生过敏", 3, embed=None).results
    assert keywords and keywords[0].source == "doc:allergy"  # still found meanwhile

    progress: list[tuple[int, int]] = []
    assert (
        reembed_knowledge(engine, new.embed_batch, "service:model-b", DIMS, progress=lambda *p: progress.append(p))
        == embedded - 2
    )
    assert vectors(engine) == (embedded, 0) and progress[-1] == (embedded - 2, embedded - 2)
    check_knowledge_vectors(engine, "service:model-b", DIMS)  # no mix left: accepted
    models = [r.json.get("model") for r in fake_model.requests_for("embeddings")]
    assert models[-1] == "model-b"
