"""The personal-memory pipeline end to end on real Redis, PostgreSQL and mem0,
with an in-process Dramatiq worker: remember, learn, recall and forget through
the client and the actors, one model call per batch, and mem0's files.

The pipeline's branches (forget during extraction, co-source relearning,
tombstones, crash recovery, batch sizes, the dirty flag) are in
``test_pipeline_branches.py``, on the in-memory twins."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from memjobs_client.contracts import ForgetSource, owner_key
from memjobs_worker.settings import Settings
from tests.support.harness import Harness
from tests.support.openai_server import FakeOpenAI, echo_facts_handler

OWNER = "alice@example.com"
KEY = owner_key(OWNER)


def states(h: Harness, key: str = KEY) -> dict[str, str]:
    return {r.source_id: r.state for r in h.store.list_sources(key)}


def test_remember_is_learned_and_recalled_verbatim_without_a_model(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(make_settings())
    h.start_worker()
    sid = h.client.remember(OWNER, "我对花生过敏。")
    h.drain()
    assert states(h) == {sid: "learned"}
    hits = h.pipeline.recall(KEY, "花生", 5)
    assert [(x.text, x.source_ids) for x in hits] == [("我对花生过敏。", [sid])]


def test_source_id_is_known_before_any_worker_runs(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(make_settings())
    sid = h.client.remember(OWNER, "remember the blue umbrella")
    assert h.queues()["memjobs_remember"]["ready"] == 1
    assert h.store.list_sources(KEY) == []
    h.start_worker()
    h.drain()
    assert states(h) == {sid: "learned"}


def test_one_model_call_covers_a_batch_and_provenance_names_every_source(
    model_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI,
) -> None:
    fake_model.set_chat_handler(echo_facts_handler)
    h = harness_factory(model_settings(extract_delay_ms=300))
    texts = ["我叫小林", "I like green tea", "我住在杭州"]
    ids = [h.client.remember(OWNER, t) for t in texts]
    h.start_worker()
    h.drain()
    assert set(states(h).values()) == {"learned"}
    assert len(fake_model.requests_for("chat")) == 1
    memories = h.pipeline.memories(KEY)
    assert sorted(m.text for m in memories) == sorted(texts)
    assert all(sorted(m.source_ids) == sorted(ids) for m in memories)


def test_forget_overtaking_its_remember_wins(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    """forget runs before remember (separate queues): the late remember must not revive it."""
    h = harness_factory(make_settings())
    sid = h.client.remember(OWNER, "the gate code hint is the cat's birthday")
    forget = ForgetSource(owner_key=KEY, source_id=sid)
    h.pipeline.forget(forget, sent_at=datetime.now(UTC))
    h.start_worker()
    h.drain()
    assert states(h) == {sid: "forgotten"}
    assert h.runtime.engine.list(KEY) == []


def test_forget_after_learning_deletes_its_memory(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(make_settings())
    h.start_worker()
    keep = h.client.remember(OWNER, "我喜欢喝咖啡")
    drop = h.client.remember(OWNER, "我对花生过敏")
    h.drain()
    h.client.forget(OWNER, drop)
    h.drain()
    assert states(h) == {keep: "learned", drop: "forgotten"}
    assert [m.text for m in h.runtime.engine.list(KEY)] == ["我喜欢喝咖啡"]
    assert all(drop not in hit.source_ids for hit in h.pipeline.recall(KEY, "花生", 5))
    assert [r.text for r in h.store.list_sources(KEY) if r.source_id == drop] == [None]


def test_mem0_writes_nothing_to_the_home_directory(make_settings: Callable[..., Settings], tmp_path: Path) -> None:
    """mem0 defaults to ~/.mem0 (history, config); memjobs keeps it in the data directory,
    once mem0 is built (a worker's warm-up builds it)."""
    import json
    import os
    import subprocess
    import sys

    from tests.support.harness import REPO, worker_env

    settings = make_settings()
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in worker_env(settings).items() if not k.startswith("MEM0_")}
    env["HOME"] = str(home)
    script = (
        "from memjobs_worker.settings import load_settings\n"
        "from memjobs_worker.endpoints import resolve_endpoints\n"
        "from memjobs_worker.runtime import Runtime, producer_client\n"
        "s = load_settings(); e = resolve_endpoints(s.data_dir, s.redis, s.database)\n"
        "rt = Runtime(s, e, producer_client(s.redis, s.memory, s.sessions, s.knowledge, redis_url=e.redis_url))\n"
        "rt.engine.warm()\n"  # mem0 built now, as a worker's warm-up does (verbatim learning needs none of it)
        "from memjobs_client.contracts import RememberSource, owner_key, source_id_for\n"
        "from datetime import datetime, UTC\n"
        "k = owner_key('hana'); t = 'hana plays the violin'\n"
        "p = RememberSource(owner_key=k, source_id=source_id_for(k, t), text=t)\n"
        "rt.pipeline.remember(p, sent_at=datetime.now(UTC))\n"
        "from memjobs_client.contracts import ExtractFacts\n"
        "print(rt.pipeline.extract(ExtractFacts(owner_key=k, trigger='manual')).learned)\n"
        "rt.close()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == 1
    assert not (home / ".mem0").exists()
    assert (Path(settings.data_dir) / "mem0").is_dir()
    assert os.listdir(home) == []
