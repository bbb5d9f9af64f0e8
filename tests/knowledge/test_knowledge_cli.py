"""``memjobs reindex`` and ``memjobs knowledge``, run as a user runs them (one
subprocess per command): knowledge off refuses every command alike, system
paths and keyed queries are refused, ``--k`` is bounded, and a large folder
is queued in parts with progress on a terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import redis

from memjobs_worker.cli import exits
from tests.support.cli import (
    Result,
    cli_env,
    run_cli,
)
from tests.support.harness import REPO


def env_for(tmp_path: Path, redis_url: str, database_url: str, **extra: str) -> dict[str, str]:
    values = {
        "MEMJOBS_REDIS_URL": redis_url,
        "MEMJOBS_DATABASE_URL": database_url,
        "NOVA_AUDIO_AGENT_MEMORY_PROVIDER": "off",
        "MEMJOBS_KNOWLEDGE_ROOTS": str(tmp_path),
    }
    return cli_env(tmp_path / "data", **{**values, **extra})


def knowledge_queue(redis_url: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.llen("memjobs:memjobs_knowledge"))
    finally:
        client.close()


def test_knowledge_off_refuses_reindex_like_the_other_knowledge_commands(
    tmp_path: Path, redis_url: str, database_url: str
) -> None:
    env = env_for(tmp_path, redis_url, database_url, MEMJOBS_KNOWLEDGE="off")
    (tmp_path / "note.md").write_text("a note")
    results = [
        run_cli(env, "reindex", "--owner", "a", "--path", str(tmp_path), "--consent"),
        run_cli(env, "knowledge", "search", "--owner", "a", "--query", "note"),
        run_cli(env, "knowledge", "list", "--owner", "a"),
        run_cli(env, "knowledge", "rebuild"),
    ]
    assert {(r.code, r.stderr) for r in results} == {
        (exits.CONFIG, "memjobs: knowledge is off (MEMJOBS_KNOWLEDGE=off)\n")
    }, [str(r) for r in results]
    assert knowledge_queue(redis_url) == 0


def test_reindex_refuses_a_system_file_and_a_symlink_to_it(tmp_path: Path, redis_url: str, database_url: str) -> None:
    (tmp_path / "notes.txt").symlink_to("/etc/passwd")
    env = env_for(tmp_path, redis_url, database_url, MEMJOBS_KNOWLEDGE_ROOTS="/")
    for path in ("/etc/passwd", str(tmp_path / "notes.txt")):
        result = run_cli(env, "reindex", "--owner", "a", "--path", path, "--consent")
        assert result.code == exits.REFUSED and "refused (sensitive_content)" in result.stderr, str(result)
        assert str(tmp_path) not in result.stderr
    outside = run_cli(
        env_for(tmp_path, redis_url, database_url), "reindex", "--owner", "a", "--path", "/usr", "--consent"
    )
    assert outside.code == exits.REFUSED and "refused (path_not_allowed)" in outside.stderr, str(outside)
    assert knowledge_queue(redis_url) == 0


def test_search_refuses_a_keyed_query_and_an_unbounded_k(tmp_path: Path, redis_url: str, database_url: str) -> None:
    env = env_for(tmp_path, redis_url, database_url)
    keyed = run_cli(env, "knowledge", "search", "--owner", "a", "--query", "find AKIAIOSFODNN7EXAMPLE in my notes")
    assert keyed.code == exits.REFUSED and "refused (sensitive_content)" in keyed.stderr, str(keyed)
    assert "AKIA" not in keyed.stderr + keyed.stdout
    big_k = run_cli(env, "knowledge", "search", "--owner", "a", "--query", "note", "--k", "100000")
    assert big_k.code == exits.REFUSED and "--k must be between 1 and 50" in big_k.stderr, str(big_k)
    fine = run_cli(env, "knowledge", "search", "--owner", "a", "--query", "note", "--k", "50", "--json")
    assert fine.code == exits.OK and fine.json()["results"] == [], str(fine)


def test_a_large_folder_is_queued_in_parts_with_progress_on_a_terminal(
    tmp_path: Path, redis_url: str, database_url: str
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(600):
        (folder / f"n{i:03d}.txt").write_text(f"note {i}")
    (folder / "link-to-self").symlink_to(folder)
    env = env_for(tmp_path, redis_url, database_url)
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "memjobs_worker.cli.main",
                "reindex",
                "--owner",
                "a",
                "--path",
                str(folder),
                "--consent",
                "--json",
            ],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=secondary,
            text=True,
            timeout=120,
        )
        os.close(secondary)
        terminal = _read_all(primary)
    finally:
        os.close(primary)
    result = Result(("reindex",), proc.returncode, proc.stdout, terminal)
    assert result.code == exits.OK, str(result)
    assert "queued part 1/2 (500 documents)" in terminal and "queued part 2/2 (100 documents)" in terminal
    answer = result.json()
    assert (answer["documents"], answer["parts"], answer["status"]) == (600, 2, "queued")
    assert answer["skipped"] == [{"name": "link-to-self", "reason": "symlinked_directory"}]
    assert knowledge_queue(redis_url) == 2


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:  # EIO: the other side is closed
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode(errors="replace")
