"""``memjobs backup`` and ``memjobs restore``: a running embedded stack, with work
queued and a dead letter, backed up while it runs and restored into a fresh
directory gives the same answers, the same queued work and the same dead letters;
a restore refuses an archive of a newer schema, a damaged one and a non-empty
directory before it writes anything.

The one stack test pays for two ``memjobs up`` (the original and the restored).
Its queued job is a knowledge re-index sent to a stack whose knowledge is off:
no worker of that stack consumes it, so the count is exact at any moment, and
the restored stack (knowledge on) runs it: a job that lived only in Redis.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import tarfile
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis

from memjobs_client import MemjobsClient, keys
from memjobs_client.contracts import QUEUE_KNOWLEDGE, QUEUE_TASKS
from memjobs_worker.cli import exits
from memjobs_worker.db import create_db_engine
from memjobs_worker.db.migrate import known_revisions
from memjobs_worker.embedded import EmbeddedPostgres
from memjobs_worker.ops.archive import FORMAT_VERSION, ArchiveWriter, Manifest
from memjobs_worker.ops.backup import restore_database
from memjobs_worker.ops.snapshots import pg_dump
from memjobs_worker.ops.status import queue_stats
from tests.ops.test_migrations import CORE_HEAD
from tests.support.cli import PEANUT, TEA, EmbeddedStack, cli_env, new_owner, ok, run_cli, scratch_dir
from tests.support.openai_server import FakeOpenAI, echo_facts_handler
from tests.support.polling import wait_for

MIGRATIONS = Path(importlib.import_module("memjobs_worker.db.migrate").__file__ or "").parent / "migrations"
CONSOLE_KEY = f"{keys.NAMESPACE}:console:key:backup-test"
NOTE = "Our family doctor is Dr. Wen at the Xixi clinic; appointments on Tuesdays."


class Door:
    """A running stack's HTTP API and Redis, for the reads the test compares
    (a CLI call costs a process start; ``backup`` and ``restore`` are the CLI's)."""

    def __init__(self, data_dir: Path) -> None:
        state = json.loads((data_dir / "run" / "stack.json").read_text())
        self.http = httpx.Client(base_url=state["api_url"], timeout=60)
        self.redis_url = state["redis_url"]
        self.redis = redis.Redis.from_url(self.redis_url)

    def close(self) -> None:
        self.http.close()
        self.redis.close()

    def call(self, method: str, path: str, owner: str | None = None, **body: Any) -> Any:
        headers = {"X-Memjobs-Owner": owner} if owner else {}
        reply = self.http.request(method, path, json=body or None, headers=headers)
        assert reply.status_code < 300, (path, reply.status_code, reply.text)
        return reply.json()

    def recall(self, owner: str, query: str) -> list[tuple[str, str, list[str]]]:
        """Recall's answer without its scores (compared by order, not by float bits)."""
        hits = self.call("POST", "/v1/recall", owner_id=owner, query=query)["memories"]
        return [(h["memory_id"], h["text"], h["source_ids"]) for h in hits]

    def totals(self) -> dict[str, tuple[int, int]]:
        """Per queue: (queued: ready + delayed + in flight, dead)."""
        return {q: (c["ready"] + c["delayed"] + c["in_flight"], c["dead"]) for q, c in queue_stats(self.redis).items()}


@pytest.mark.slow
def test_a_running_stack_backed_up_with_work_queued_restores_with_the_same_answers() -> None:
    with scratch_dir("backup") as base, FakeOpenAI(embedding_dims=64) as model:
        model.set_chat_handler(echo_facts_handler)
        env = cli_env(
            base / "data",
            MEMJOBS_KNOWLEDGE="off",
            MEMJOBS_EXTRACT_DELAY_MS="20",
            MEM0_DIR=str(base / "mem0"),
            QWEN_AUDIO_MEMORY_BASE_URL=model.base_url,
            QWEN_AUDIO_MEMORY_API_KEY="k",
            MEMJOBS_KNOWLEDGE_ROOTS=str(base),
        )
        original = EmbeddedStack(base / "data", env, [], set(), set())
        restored_env = dict(env, MEMJOBS_DATA_DIR=str(base / "restored"), MEMJOBS_KNOWLEDGE="on")
        restored = EmbeddedStack(base / "restored", restored_env, [], set(), set())
        doors: list[Door] = []
        try:
            original.start("up-1.out")
            door = Door(base / "data")
            doors.append(door)
            alice, bob = new_owner("backup-a"), new_owner("backup-b")
            for owner, text in ((alice, PEANUT), (bob, TEA)):
                door.call("POST", "/v1/remember", owner_id=owner, text=text)
            door.call(
                "POST",
                "/v1/memory/edits",
                owner_id=alice,
                edits=[{"op": "append", "doc": "USER.md", "text": "- 叫我小林"}],
            )
            asked = {alice: "花生", bob: "green tea"}

            def learned() -> dict[str, Any] | None:
                got = {o: door.recall(o, q) for o, q in asked.items()}
                return got if all(got.values()) else None

            answers = wait_for(learned, 60, "both owners' sources to be learned")

            # Work queued that no worker of this stack takes (its knowledge is off) ...
            # (a producer that has knowledge on: the CLI would follow the stack and refuse)
            MemjobsClient(door.redis_url, knowledge_enabled=True).reindex_knowledge(
                bob, [{"doc_id": "doctor", "title": "doctor.md", "text": NOTE}], consent=True
            )
            # ... and a dead letter: bytes that are not a job, dead-lettered by the consumer.
            door.redis.hset(keys.messages(QUEUE_TASKS), "not-a-job", b"\x00garbage")
            door.redis.rpush(keys.queue(QUEUE_TASKS), "not-a-job")
            door.redis.set(CONSOLE_KEY, "a signing key never to leave the stack")
            wait_for(lambda: door.totals()[QUEUE_TASKS] == (0, 1), 60, "the garbage to be dead-lettered")
            wait_for(lambda: sum(q for q, _ in door.totals().values()) == 1, 60, "only the re-index queued")
            before = door.totals()
            assert before[QUEUE_KNOWLEDGE] == (1, 0), before
            dead_before = door.call("GET", "/v1/ops/dead-letters")

            archive = base / "stack.tar"
            summary = ok(original.cli("backup", "-o", str(archive), "--json")).json()  # while it runs
            assert summary["memory_owners"] == 1 and summary["schema"], summary
            assert door.totals() == before, "the backup changed the running stack"
            with tarfile.open(archive) as tar:
                manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
                settings = json.loads(tar.extractfile("settings.json").read())  # type: ignore[union-attr]
            assert {c["name"] for c in manifest["contents"]} >= {"postgres.dump", "redis.rdb", "settings.json"}
            assert "k" not in settings.values() and "model.api_key" not in settings
            assert "model.api_key" in manifest["settings"]["secrets_left_out"]
            os.killpg(original.up.proc.pid, signal.SIGTERM)  # it stops in order while the restore runs
            result = run_cli(restored_env, "restore", str(archive), "--data-dir", str(base / "restored"), "--json")
            done = ok(result).json()
            assert (done["queued"], done["dead_letters"]) == (
                sum(q for q, _ in before.values()),
                sum(d for _, d in before.values()),
            ), done
            assert "knowledge.mode was 'off'" in result.stderr  # the restoring host's settings differ
            original.up.close()

            restored.start("up-2.out")
            again = Door(base / "restored")
            doors.append(again)
            for owner, query in asked.items():
                assert again.recall(owner, query) == answers[owner]
            doc = again.call("GET", "/v1/memory/documents/USER.md", owner=alice)
            assert doc["content"].strip() == "- 叫我小林", doc
            assert again.call("GET", "/v1/ops/dead-letters") == dead_before
            assert again.redis.get(CONSOLE_KEY) is None  # scrubbed from the archive
            # The job that was only in Redis runs in the restored stack.
            found = wait_for(
                lambda: again.call("POST", "/v1/knowledge/search", owner_id=bob, query="family doctor")["results"],
                60,
                "the queued re-index to run in the restored stack",
            )
            assert "Dr. Wen" in found[0]["text"]
        finally:
            for d in doors:
                d.close()
            for stack in (original, restored):
                for up in stack.started:
                    up.close()


def test_a_dump_of_an_older_schema_is_restored_and_migrated_to_head(
    pg_server: EmbeddedPostgres, tmp_path: Path
) -> None:
    from alembic import command
    from alembic.config import Config

    names = [f"t_old_{uuid.uuid4().hex[:8]}", f"t_new_{uuid.uuid4().hex[:8]}"]
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        for name in names:
            conn.execute(f"CREATE DATABASE {name}")
    old_url, new_url = (pg_server.url.rsplit("/", 1)[0] + f"/{n}" for n in names)
    try:
        engine = create_db_engine(old_url, pool_size=1)
        with engine.connect() as conn:  # the schema of an older memjobs
            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS))
            config.attributes["connection"] = conn
            command.upgrade(config, "0008_embedding_model")
            conn.commit()
        engine.dispose()
        pg_dump(old_url, tmp_path / "old.dump")
        revisions = restore_database(new_url, tmp_path / "old.dump", knowledge=False)
        assert revisions == [CORE_HEAD]  # migrated on from 0008 to the newest
    finally:
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            for name in names:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _archive(path: Path, revisions: list[str]) -> Path:
    writer = ArchiveWriter(path)
    writer.add_bytes("settings.json", b"{}")
    writer.finish(Manifest("99.0.0", "2030-01-01T00:00:00+00:00", revisions))
    return path


def test_a_restore_refuses_an_archive_of_a_newer_schema_and_writes_nothing(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "future.tar", ["0010_session_run_endings", "0099_from_the_future"])
    target = tmp_path / "new"
    result = run_cli(cli_env(target), "restore", str(archive), "--data-dir", str(target))
    assert result.code == exits.REFUSED, str(result)
    assert "newer_schema" in result.stderr and "0099_from_the_future" in result.stderr
    assert "memjobs 99.0.0" in result.stderr
    assert not target.exists()


def test_a_restore_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "ok.tar", [max(known_revisions())])
    target = tmp_path / "used"
    target.mkdir()
    (target / "something").write_text("mine")
    result = run_cli(cli_env(target), "restore", str(archive), "--data-dir", str(target))
    assert result.code == exits.REFUSED, str(result)
    assert "not_empty" in result.stderr and "not empty" in result.stderr
    assert [p.name for p in target.iterdir()] == ["something"]


def test_a_restore_refuses_a_damaged_or_foreign_archive(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "ok.tar", [max(known_revisions())])
    data = archive.read_bytes()
    damaged = tmp_path / "damaged.tar"
    damaged.write_bytes(data.replace(b"{}", b"[]", 1))  # settings.json no longer matches its checksum
    foreign = tmp_path / "foreign.tar"
    foreign.write_bytes(b"not a tar at all" * 100)
    for path, reason in ((damaged, "damaged_archive"), (foreign, "bad_archive")):
        target = tmp_path / f"into-{path.stem}"
        result = run_cli(cli_env(target), "restore", str(path), "--data-dir", str(target))
        assert result.code == exits.REFUSED, str(result)
        assert reason in result.stderr, str(result)
        assert not target.exists() or not any(target.iterdir())
    assert FORMAT_VERSION == 1


def test_a_backup_without_a_running_stack_says_how_to_start_one_and_writes_nothing(tmp_path: Path) -> None:
    result = run_cli(cli_env(tmp_path / "data"), "backup", "-o", str(tmp_path / "stack.tar"))
    assert result.code == exits.CONFIG, str(result)
    assert "memjobs up" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "stack.tar").exists()
