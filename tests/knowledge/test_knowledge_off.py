"""Knowledge is opt-in (issue 22; seed 000: 可选开启): off by default, and off
means no worker consumes the knowledge queue, no MCP server, the knowledge
routes and commands answer ``knowledge_off``, and memory recall is unaffected.

The settings here leave ``MEMJOBS_KNOWLEDGE`` unset (the other tests turn it on
explicitly: tests/conftest.py, tests/support/cli.py).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from memjobs_client.contracts import ACTOR_REINDEX, QUEUE_KNOWLEDGE, ReindexKnowledge, owner_key
from memjobs_client.payloads import build_payload
from memjobs_worker.cli import exits
from memjobs_worker.pools import worker_pools
from memjobs_worker.settings import KnowledgeSettings, Settings
from tests.support.cli import cli_env, run_cli
from tests.support.harness import REPO, Harness, worker_env
from tests.support.http import Api, problem, remember
from tests.support.polling import wait_for

OWNER = "ren@example.com"


def default(make_settings: Callable[..., Settings], **overrides: object) -> Settings:
    """The test services' settings with MEMJOBS_KNOWLEDGE as if unset."""
    settings = make_settings(**overrides)
    knowledge = settings.knowledge
    kept = {name: getattr(knowledge, name) for name in knowledge.model_fields_set - {"mode"}}
    return settings.model_copy(update={"knowledge": KnowledgeSettings(**kept)})


def test_knowledge_is_off_by_default(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert settings.knowledge.mode == "off" and not settings.knowledge.enabled
    off = worker_pools(settings.workers, 1, 1, knowledge_on=settings.knowledge.enabled)
    assert QUEUE_KNOWLEDGE not in [q for pool in off for q in pool.command]  # no pool of the host consumes it
    on = [q for pool in worker_pools(settings.workers, 1, 1, knowledge_on=True) for q in pool.command]
    assert QUEUE_KNOWLEDGE in on


def test_off_no_knowledge_consumer_no_mcp_refusals_and_recall_works(
    make_settings: Callable[..., Settings],
    api_factory: Callable[..., Api],
) -> None:
    settings = default(make_settings, api_port=0)
    assert not settings.knowledge.enabled
    api = api_factory(settings=settings)
    h: Harness = api.harness
    assert ACTOR_REINDEX not in h.actors and ACTOR_REINDEX not in h.broker.actors
    assert QUEUE_KNOWLEDGE not in h.broker.get_declared_queues()
    # The routes refuse, in their problem type; /mcp is not served at all.
    problem(api.post("/v1/knowledge/search", {"owner_id": OWNER, "query": "tea"}), "knowledge_off", 409)
    problem(
        api.post("/v1/knowledge/reindex", {"owner_id": OWNER, "consent": True, "documents": []}), "knowledge_off", 409
    )
    assert api.http.post("/mcp", json={}).status_code == 404
    # A message queued anyway (a producer with knowledge on) is not consumed by this worker...
    h.client.send(
        ACTOR_REINDEX,
        build_payload(
            ReindexKnowledge,
            owner_key=owner_key(OWNER),
            consent=True,
            documents=[{"doc_id": "d", "title": "t", "text": "tea"}],
        ),
    )
    # ...while personal memory goes on: remembered, learned, recalled.
    source_id = remember(api, OWNER, "I drink green tea every morning")
    found = wait_for(
        lambda: api.post("/v1/recall", {"owner_id": OWNER, "query": "green tea"}).json()["memories"],
        60,
        "the remembered source recalled",
    )
    assert [m["source_ids"] for m in found] == [[source_id]]
    assert h.queues()[QUEUE_KNOWLEDGE]["ready"] == 1 and h.queues()[QUEUE_KNOWLEDGE]["in_flight"] == 0
    with h.store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT to_regclass('knowledge_chunks')")).scalar() is None
    # `memjobs drain` does not wait on a queue nobody consumes.
    drained = subprocess.run(
        [sys.executable, "-m", "memjobs_worker.cli.main", "drain", "--timeout", "30"],
        env=worker_env(settings),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=90,
    )
    assert drained.returncode == 0, drained.stdout + drained.stderr
    assert h.queues()[QUEUE_KNOWLEDGE]["ready"] == 1


def test_the_cli_refuses_knowledge_and_mcp_by_default(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "data")
    del env["MEMJOBS_KNOWLEDGE"]  # as in a shell that never set it
    results = [
        run_cli(env, "knowledge", "search", "--owner", "a", "--query", "note"),
        run_cli(env, "mcp", "--owner", "a"),
    ]
    assert {(r.code, r.stderr) for r in results} == {
        (exits.CONFIG, "memjobs: knowledge is off (MEMJOBS_KNOWLEDGE=off)\n")
    }, [str(r) for r in results]
