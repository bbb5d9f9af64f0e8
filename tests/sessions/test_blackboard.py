"""A session's L0 blackboard in the state database: appended through the
``append_blackboard`` job (idempotent by entry id), read back in event order
whatever order it arrived in, kept within the seeds' three limits (7 days per
entry, 1,000 entries, 8 MB per session, the oldest dropped first), secrets
refused like every other field; the seeds' SQLite blackboard imported."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dramatiq import Message

from memjobs_client import SessionBlackboard
from memjobs_client.contracts import (
    ACTOR_APPEND_BLACKBOARD,
    QUEUE_TASKS,
    BlackboardEntry,
    owner_key,
)
from memjobs_client.errors import SensitiveContent
from memjobs_worker.db.connect import transaction
from memjobs_worker.sessions.blackboard import BlackboardStore, Limits, erase_owner, export_owner
from memjobs_worker.settings import Settings
from tests.support.harness import REPO, Harness, worker_env

OWNER = "board@example.com"
KEY = owner_key(OWNER)
NOW = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)


def entry(seq: int, *, at: datetime = NOW, result: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "entry_id": f"e-{seq}",
        "seq": seq,
        "at": at.isoformat(),
        "trust": "runtime",
        "priority": seq % 3,
        "result": result if result is not None else f"step {seq} done",
        "evidence": [f"turn:{seq}"],
        **extra,
    }


def built(seq: int, **kw: Any) -> BlackboardEntry:
    return BlackboardEntry.model_validate(entry(seq, **kw))


def seqs(entries: list[dict[str, Any]]) -> list[int]:
    return [e["seq"] for e in entries]


@pytest.fixture
def h(make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]) -> Harness:
    return harness_factory(make_settings())


def store_at(h: Harness, now: list[datetime], **limits: int) -> BlackboardStore:
    return BlackboardStore(h.runtime.db, limits=Limits(**limits), clock=lambda: now[0])


def test_entries_arriving_out_of_order_are_read_in_event_order_and_a_reappend_changes_nothing(h: Harness) -> None:
    h.start_worker()
    board = SessionBlackboard(h.client)
    now = datetime.now(UTC)
    for seq in (3, 1, 2):  # three messages, in the wrong order
        assert board.append(OWNER, "s-1", [entry(seq, at=now)]) == 1
    h.drain()
    assert seqs(h.runtime.blackboard.restore(KEY, "s-1")) == [1, 2, 3]
    # The same entry again (a gateway's retry), even with other words: the first write wins.
    board.append(OWNER, "s-1", [entry(2, at=now, result="rewritten"), entry(4, at=now)])
    h.drain()
    restored = h.runtime.blackboard.restore(KEY, "s-1")
    assert seqs(restored) == [1, 2, 3, 4]
    assert restored[1] == {**entry(2, at=now), "kind": None, "at": restored[1]["at"]}
    assert restored[1]["result"] == "step 2 done"
    done = h.runtime.blackboard.append(KEY, "s-1", [built(1, at=now), built(1, at=now)])
    assert (done.added, done.duplicates, done.dropped) == (0, 2, 0)
    assert h.runtime.blackboard.restore(owner_key("someone-else"), "s-1") == []  # owner-scoped


def test_1001_entries_keep_the_newest_1000_even_when_the_oldest_arrives_last(h: Harness) -> None:
    now = [NOW]
    store = store_at(h, now)
    for start in range(2, 1002, 100):
        store.append(KEY, "s-many", [built(seq) for seq in range(start, min(start + 100, 1002))])
    assert len(store.restore(KEY, "s-many")) == 1000
    done = store.append(KEY, "s-many", [built(1)])  # the oldest event, arriving last
    assert (done.added, done.dropped) == (1, 1)
    kept = store.restore(KEY, "s-many")
    assert seqs(kept) == list(range(2, 1002))
    store.append(KEY, "s-many", [built(1002)])
    assert seqs(store.restore(KEY, "s-many"))[:2] == [3, 4]  # the oldest dropped first
    assert len(store.restore(KEY, "s-other")) == 0


def test_an_entry_lives_7_days_from_its_event_time(h: Harness) -> None:
    now = [NOW]
    store = store_at(h, now)
    done = store.append(
        KEY, "s-old", [built(1, at=NOW - timedelta(days=8)), built(2, at=NOW - timedelta(days=6)), built(3)]
    )
    assert (done.added, done.dropped) == (3, 1)  # the 8-day-old entry is gone at once
    assert seqs(store.restore(KEY, "s-old")) == [2, 3]
    now[0] = NOW + timedelta(days=1, hours=1)  # entry 2 is now over 7 days old
    assert seqs(store.restore(KEY, "s-old")) == [3]  # never read once past its 7 days
    assert store.prune() == 1
    with transaction(h.runtime.db) as conn:
        assert [e["seq"] for e in export_owner(conn, OWNER)["s-old"]] == [3]


def test_8_mb_per_session_drops_the_oldest_entries(h: Harness) -> None:
    now = [NOW]
    store = store_at(h, now)
    text = "黑板" * 10_000 + "x" * 4_000  # 64,000 bytes of UTF-8: 8 MB is about 131 of them
    for start in range(1, 141, 20):
        # Constructed without the credential scan (this test is about the cap, not the check).
        store.append(
            KEY,
            "s-big",
            [
                BlackboardEntry.model_construct(**{**entry(seq, result=text), "at": NOW, "evidence": (f"turn:{seq}",)})
                for seq in range(start, start + 20)
            ],
        )
    kept = store.restore(KEY, "s-big")
    size = sum(BlackboardEntry.model_validate(e).size_bytes() for e in kept)
    assert 8 * 1024 * 1024 - 70_000 < size <= 8 * 1024 * 1024
    assert seqs(kept) == list(range(141 - len(kept), 141))  # the newest, contiguous: oldest dropped
    assert len(kept) < 140


def test_a_secret_in_any_field_is_refused_at_the_producer_and_at_the_worker(h: Harness) -> None:
    board = SessionBlackboard(h.client)
    for bad in (
        entry(1, result="my password is hunter2!"),
        entry(1, evidence=["sk-proj-" + "a1B2c3D4e5F6g7H8i9J0" * 3]),
        entry(1, entry_id="AKIAIOSFODNN7EXAMPLE"),
    ):
        with pytest.raises(SensitiveContent) as refused:
            board.append(OWNER, "s-secret", [entry(2), bad])
        assert "hunter2" not in str(refused.value)
    assert h.queues()[QUEUE_TASKS]["ready"] == 0  # nothing of any of them was queued
    # A message written into Redis by hand meets the same check at the worker.
    h.broker.enqueue(
        Message(
            queue_name=QUEUE_TASKS,
            actor_name=ACTOR_APPEND_BLACKBOARD,
            args=(
                {"owner_key": KEY, "session_id": "s-secret", "entries": [entry(3, result="my password is hunter2!")]},
            ),
            kwargs={},
            options={},
        )
    )
    h.start_worker()
    h.drain()
    assert h.runtime.blackboard.restore(KEY, "s-secret") == []
    assert h.queues()[QUEUE_TASKS]["dead"] == 0  # acknowledged, not kept in a dead letter


def test_an_owner_is_erased_and_exported_everywhere(h: Harness) -> None:
    store = store_at(h, [NOW])
    store.append(KEY, "s-a", [built(2), built(1)])
    store.append(KEY, "s-b", [built(1)])
    store.append(owner_key("other"), "s-a", [built(1)])
    with transaction(h.runtime.db) as conn:
        exported = export_owner(conn, OWNER)
        assert {s: seqs(e) for s, e in exported.items()} == {"s-a": [1, 2], "s-b": [1]}
        assert erase_owner(conn, OWNER) == 3
    assert store.restore(KEY, "s-a") == [] and len(store.restore(owner_key("other"), "s-a")) == 1


SEED_SCHEMA = """CREATE TABLE blackboard_entries (
  owner_id TEXT NOT NULL, session_id TEXT NOT NULL, entry_id TEXT NOT NULL,
  seq INTEGER NOT NULL, recorded_at_ms INTEGER NOT NULL, trust TEXT NOT NULL,
  priority INTEGER NOT NULL DEFAULT 0, kind TEXT, result TEXT NOT NULL DEFAULT '',
  evidence TEXT NOT NULL DEFAULT '[]', PRIMARY KEY (owner_id, session_id, entry_id))"""


def seed_sqlite(path: Path, now: datetime) -> None:
    ms = int(now.timestamp() * 1000)
    with sqlite3.connect(path) as conn:
        conn.execute(SEED_SCHEMA)
        rows: list[tuple[object, ...]] = [
            (
                OWNER,
                "s-home",
                f"e-{seq}",
                seq,
                ms - (10 - seq) * 1000,
                "runtime",
                seq,
                "task_admitted",
                f"step {seq}",
                json.dumps([f"turn:{seq}"]),
            )
            for seq in (3, 1, 2)
        ]
        rows.append((OWNER, "s-home", "e-9", 9, ms, "model", 0, None, "my password is hunter2!", "[]"))
        rows.append((OWNER, "s-away", "e-1", 1, ms, "user", 0, None, "hello", "[]"))
        rows.append(("another-owner", "s-home", "e-5", 5, ms, "runtime", 0, None, "not theirs", "[]"))
        conn.executemany("INSERT INTO blackboard_entries VALUES (?,?,?,?,?,?,?,?,?,?)", rows)


def test_the_seeds_sqlite_blackboard_is_imported_once_from_its_settings(h: Harness, tmp_path: Path) -> None:
    path = tmp_path / "blackboard.sqlite"
    seed_sqlite(path, datetime.now(UTC))

    def run(*args: str, action: str = "import", **env: str) -> Any:
        done = subprocess.run(
            [sys.executable, "-m", "memjobs_worker.cli.main", "blackboard", action, "--json", *args],
            env=worker_env(h.settings, **env),
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "hunter2" not in done.stdout + done.stderr
        return json.loads(done.stdout)

    first = run("--path", str(path), "--owner", OWNER)
    assert first == {"sessions": 2, "added": 4, "duplicates": 0, "dropped": 0, "refused": {"sensitive_content": 1}}
    # Again, from the seeds' two settings: nothing new.
    again = run(NOVA_AUDIO_AGENT_BLACKBOARD_PATH=str(path), NOVA_AUDIO_AGENT_BLACKBOARD_OWNER_ID=OWNER)
    assert (again["added"], again["duplicates"]) == (0, 4)
    home = h.runtime.blackboard.restore(KEY, "s-home")
    assert seqs(home) == [1, 2, 3] and home[0]["kind"] == "task_admitted"
    assert home[0]["evidence"] == ["turn:1"] and home[0]["priority"] == 1
    assert seqs(h.runtime.blackboard.restore(KEY, "s-away")) == [1]
    assert h.runtime.blackboard.restore(owner_key("another-owner"), "s-home") == []
    shown = run("--owner", OWNER, "--session", "s-home", action="show")
    assert [(e["seq"], e["result"]) for e in shown] == [(1, "step 1"), (2, "step 2"), (3, "step 3")]
