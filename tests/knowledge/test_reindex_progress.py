"""A reindex on its way is visible (issue 33): ``knowledge list`` shows its
documents ``queued`` until a worker takes it, ``indexing`` while it runs, and
their indexed state once written; ``reindex --wait`` follows it to its end or
says, with exit 1, that it is still indexing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import redis

from memjobs_client import reindexing
from memjobs_client.contracts import owner_key
from memjobs_worker.cli import exits
from memjobs_worker.settings import Settings
from tests.support.cli import cli_env, new_owner, run_cli
from tests.support.harness import Harness


def test_knowledge_list_shows_a_queued_reindex_and_wait_says_it_is_not_done(
    tmp_path: Path, redis_url: str, database_url: str
) -> None:
    """No worker runs here: what is queued stays queued."""
    (tmp_path / "tea.md").write_text("Oolong tea is half oxidised.")
    env = cli_env(
        tmp_path / "data",
        MEMJOBS_REDIS_URL=redis_url,
        MEMJOBS_DATABASE_URL=database_url,
        MEMJOBS_KNOWLEDGE_ROOTS=str(tmp_path),
    )
    owner = new_owner("progress")
    queued = run_cli(env, "reindex", "--owner", owner, "--path", str(tmp_path / "tea.md"), "--consent", "--wait", "0.5")
    assert queued.code == exits.FAILED, str(queued)
    assert queued.stdout.startswith("queued 1 documents") and "still indexing after 0.5 s" in queued.stderr

    listed = run_cli(env, "knowledge", "list", "--owner", owner, "--json")
    assert listed.code == exits.OK, str(listed)
    assert [(d["title"], d["state"]) for d in listed.json()] == [("tea.md", "queued")]
    table = run_cli(env, "knowledge", "list", "--owner", owner)
    assert "tea.md" in table.stdout and "queued" in table.stdout and "no documents" not in table.stdout


def test_the_worker_marks_the_reindex_indexing_then_ends_it_with_its_last_part(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(make_settings(embedding_base_url=None, local_embedder="hashing"))
    owner = "reader-progress@example.com"
    key = owner_key(owner)
    client = redis.Redis.from_url(h.settings.redis.url or "")
    try:
        h.client.reindex_knowledge(
            owner,
            [
                {"doc_id": "tea", "title": "Tea", "text": "Oolong tea."},
                {"doc_id": "rice", "title": "Rice", "text": "Jasmine rice."},
            ],
            consent=True,
            part_size=1,
        )
        record = reindexing.read(client, key)
        assert record is not None and record["state"] == "queued" and record["parts"] == 2
        assert [title for _, title in record["documents"]] == ["Tea", "Rice"]
        reindexing.mark_indexing(client, key)
        reindexing.part_done(client, key)
        assert (reindexing.read(client, key) or {}).get("state") == "indexing", "one part of two is done"
        reindexing.part_done(client, key)
        assert reindexing.read(client, key) is None

        h.client.reindex_knowledge(owner, [{"doc_id": "tea", "title": "Tea", "text": "Oolong tea."}], consent=True)
        h.start_worker()
        h.drain()  # the real job: it ends the record as it writes the corpus
        assert reindexing.read(client, key) is None
        assert {d.state for d in h.runtime.knowledge.documents(key)} == {"indexed"}
    finally:
        client.close()
