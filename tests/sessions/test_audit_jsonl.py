"""``memjobs audit --jsonl [--follow]``: the seeds' ``memory-audit.jsonl`` lines
(whether a patch was applied, its version, its error; never the memory text)
read from the one trail of every host, and followed as new rows arrive."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO

import pytest

from memjobs_client.contracts import owner_key
from memjobs_worker.sessions.memory_docs import ChangeContext
from memjobs_worker.settings import Settings
from tests.support.harness import REPO, Harness, kill_group, worker_env

OWNER = "audit-jsonl@example.com"
KEY = owner_key(OWNER)
#: The fields of a line of the seeds' memory-audit.jsonl, as memjobs wrote the file before
#: the trail moved to the database, with the seed's `error` (why a patch was not applied).
SEED_FIELDS = {"ts", "owner_key", "session_id", "doc", "op", "applied", "version", "error"}
SECRET_FREE_TEXT = "- 住在杭州西湖边"


@pytest.fixture
def h(make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]) -> Harness:
    return harness_factory(make_settings(memory_docs_provider="sql"))


def memjobs(h: Harness, *args: str) -> list[str]:
    return [sys.executable, "-m", "memjobs_worker.cli.main", "audit", "--owner", OWNER, *args]


def patch(h: Harness, session: str, text: str = SECRET_FREE_TEXT) -> None:
    h.runtime.memory_docs.append(OWNER, "MEMORY.md", text, context=ChangeContext("memory_tool", session=session))


def test_lines_have_the_seeds_fields_oldest_first_and_never_the_text(h: Harness) -> None:
    patch(h, "s-1")
    patch(h, "s-2")  # the same text again: not applied, its reason is the line's error
    h.runtime.memory_docs.replace(OWNER, "MEMORY.md", "上海", "北京", context=ChangeContext("cli", session="s-3"))
    done = subprocess.run(
        memjobs(h, "--jsonl"), env=worker_env(h.settings), capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert all(set(line) == SEED_FIELDS for line in lines)
    assert [(x["session_id"], x["applied"], x["version"], x["error"]) for x in lines] == [
        ("s-1", True, 1, None),
        ("s-2", False, 1, "duplicate"),
        ("s-3", False, 1, "not_found"),
    ]
    assert all(x["owner_key"] == KEY and x["doc"] == "MEMORY.md" for x in lines)
    assert "杭州" not in done.stdout and "北京" not in done.stdout and OWNER not in done.stdout


def _lines(stream: IO[str], into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


def test_follow_prints_a_row_written_after_it_started(h: Harness) -> None:
    patch(h, "s-before")
    proc = subprocess.Popen(
        memjobs(h, "--jsonl", "--follow", "--poll-ms", "100"),
        env=worker_env(h.settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        first = json.loads(lines.get(timeout=120))  # the trail so far: it has started reading
        assert (first["session_id"], first["applied"]) == ("s-before", True)
        patch(h, "s-after", "- 喜欢喝龙井")
        after = json.loads(lines.get(timeout=120))
        assert set(after) == SEED_FIELDS
        assert (after["session_id"], after["applied"], after["version"]) == ("s-after", True, 2)
        assert proc.poll() is None  # still following
    finally:
        kill_group(proc)
        proc.wait(30)
