"""Changing the embedder is safe (issue 24): stored vectors record their model,
a stack with another embedder refuses them in words that name the fix, and
``memjobs reembed`` re-embeds them — resumably, memory ids kept — after which
recall answers with the new model. Real Redis, PostgreSQL and mem0; the local
model loads once per process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from memjobs_client.contracts import owner_key
from memjobs_worker.db.connect import libpq_url
from memjobs_worker.embedding import build_embedder, model_id
from memjobs_worker.embedding.local import MODEL_ID
from memjobs_worker.embedding.record import EmbeddingModelChanged
from memjobs_worker.memory.engine.reembed import reembed_memories
from memjobs_worker.ops.reembed import pending, reembed
from memjobs_worker.settings import Settings
from tests.support.harness import REPO, Harness, worker_env
from tests.support.openai_server import FakeOpenAI

OWNER = "switch@example.com"
KEY = owner_key(OWNER)
FACTS = ["我对花生过敏", "My son plays football on Thursdays", "I drive a blue Toyota Corolla"]


def learn(h: Harness) -> list[str]:
    h.start_worker()
    for text in FACTS:
        h.client.remember(OWNER, text)
    h.drain()
    h.stop_worker()
    return sorted(m.memory_id for m in h.runtime.personal_memory.memories(KEY))


def tables(database_url: str) -> dict[str, int]:
    with psycopg.connect(libpq_url(database_url)) as conn:
        names = [
            r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'mem0\\_memories\\_%'")
        ]
        return {n: conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}  # type: ignore[index]


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memjobs_worker.cli.main", *args],
        cwd=REPO,
        env=worker_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_new_default_refuses_the_old_vectors_then_reembeds_them_resumably(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    old = make_settings(local_embedder="hashing")
    ids = learn(harness_factory(old))
    assert tables(old.database.url or "") == {"mem0_memories_512": 3}

    new = make_settings(local_embedder="e5")
    h = harness_factory(new)
    with pytest.raises(EmbeddingModelChanged) as refused:
        h.runtime.personal_memory.recall(KEY, "what am I allergic to?", 3)
    message = str(refused.value)
    assert "3 stored memories" in message and "memjobs reembed" in message and MODEL_ID in message
    assert "hashing-v1" in message

    check = cli(new, "reembed", "--check", "--json")
    assert check.returncode == 1, check.stderr
    assert json.loads(check.stdout)["memories"] == 3
    # Workers of their own (not `up`) refuse to start rather than fail job by job.
    refused_start = cli(new, "worker")
    assert refused_start.returncode == 3, refused_start.stderr
    assert "3 stored memories" in refused_start.stderr and "memjobs reembed" in refused_start.stderr

    # Interrupted after the first batch of one: what moved stays moved, the rest waits.
    embedder = build_embedder(new.model, new.embedding)
    calls: list[int] = []

    class Failing:
        def embed_batch(self, texts: list[str], action: Any = None) -> list[list[float]]:
            calls.append(len(texts))
            if len(calls) > 1:
                raise ConnectionError("interrupted")
            return embedder.embed_batch(texts, action)  # type: ignore[no-any-return]

    with pytest.raises(ConnectionError):
        reembed_memories(libpq_url(new.database.url or ""), Failing(), model_id(new.embedding), 384, batch=1)
    assert tables(new.database.url or "") == {"mem0_memories_512": 2, "mem0_memories_384": 1}
    assert pending(new.embedding, new.memory, new.knowledge, new.database.url or "").memories == 2

    progress: list[tuple[str, int, int]] = []
    assert (
        reembed(
            new.model,
            new.embedding,
            new.memory,
            new.knowledge,
            new.database.url or "",
            progress=lambda *p: progress.append(p),
        )[0]
        == 2
    )
    assert progress[-1] == ("memories", 2, 2)
    assert tables(new.database.url or "") == {"mem0_memories_384": 3}

    fresh = harness_factory(new)
    assert sorted(m.memory_id for m in fresh.runtime.personal_memory.memories(KEY)) == ids
    hits = fresh.runtime.personal_memory.recall(KEY, "what am I allergic to?", 1)
    assert [x.text for x in hits] == ["我对花生过敏"]
    assert cli(new, "reembed", "--check", "--json").returncode == 0


def test_another_model_of_the_same_size_is_refused_and_replaced_not_mixed(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI,
) -> None:
    """Same size, other model: nothing but the record tells them apart."""
    fake_model.embedding_dims = 384
    service = make_settings(embedding_base_url=fake_model.base_url, embedding_model="stand-in", embedding_dims=384)
    ids = learn(harness_factory(service))
    new = make_settings(local_embedder="e5")
    with pytest.raises(EmbeddingModelChanged) as refused:
        harness_factory(new).runtime.personal_memory.recall(KEY, "football", 3)
    assert "service:stand-in (384 dimensions)" in str(refused.value)

    done = cli(new, "reembed")
    assert done.returncode == 0, done.stderr
    assert "re-embedded 3 memories" in done.stdout and "of 3" in done.stderr
    assert tables(new.database.url or "") == {"mem0_memories_384": 3}
    fresh = harness_factory(new)
    assert sorted(m.memory_id for m in fresh.runtime.personal_memory.memories(KEY)) == ids
    hits = fresh.runtime.personal_memory.recall(KEY, "儿子哪天有球赛", 1)
    assert [x.text for x in hits] == ["My son plays football on Thursdays"]


@pytest.mark.slow
def test_memjobs_up_reembeds_the_old_defaults_vectors_before_its_workers_start(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    """An upgrade from the hashed default: `up` re-embeds and says so, then serves."""
    from memjobs_worker.supervisor import Stack

    ids = learn(harness_factory(make_settings(local_embedder="hashing")))
    new = make_settings(local_embedder="e5", metrics="off")
    stack = Stack(new, processes=1, threads=1)
    try:
        stack.start()
        notices = list(stack.notices)
    finally:
        problems = stack.stop()
    assert problems == []
    assert any(f"re-embedded 3 memories and 0 knowledge chunks with {MODEL_ID}" in n for n in notices), notices
    assert tables(new.database.url or "") == {"mem0_memories_384": 3}
    fresh = harness_factory(new)
    assert sorted(m.memory_id for m in fresh.runtime.personal_memory.memories(KEY)) == ids
    assert [x.text for x in fresh.runtime.personal_memory.recall(KEY, "what can't I eat?", 1)] == ["我对花生过敏"]
