"""The memory audit in the state database: one trail for every host (two
worker processes with their own data directories write to it), readable with
``memjobs audit`` and pruned to its retention; never memory text."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memjobs_client.contracts import owner_key
from memjobs_worker.sessions.memory_docs import AuditEntry, AuditTrail, ChangeContext
from memjobs_worker.settings import Settings
from tests.support.cli import Result, run_cli
from tests.support.harness import HarnessFactory, MakeSettings, kill_group, spawn_workers, worker_env
from tests.support.openai_server import EMPTY_FACTS_REPLY, FakeOpenAI, is_consolidation, patch_reply
from tests.support.polling import wait_for

OWNER = "audit@example.com"
KEY = owner_key(OWNER)


def cli(settings: Settings, *args: str) -> Result:
    return run_cli(worker_env(settings), *args)


def test_two_worker_hosts_write_one_audit_trail(
    model_settings: MakeSettings,
    harness_factory: HarnessFactory,
    fake_model: FakeOpenAI,
    procs: list[Any],
    tmp_path: Path,
) -> None:
    fake_model.set_chat_handler(
        lambda r: patch_reply("- Lives in Hangzhou", "I live in Hangzhou") if is_consolidation(r) else EMPTY_FACTS_REPLY
    )
    common = {"memory_docs_provider": "sql", "memory_provider": "off"}
    hosts = [model_settings(data_dir=tmp_path / f"host-{n}", **common) for n in (1, 2)]
    h = harness_factory(hosts[0])  # the producer and the reader; no worker of its own
    pids = []
    for n, settings in enumerate(hosts, start=1):
        # One host at a time, so that each of them certainly handles one session.
        worker = spawn_workers(settings, tmp_path / f"worker-{n}.log", threads=1)
        procs.append(worker)
        h.client.end_session(
            OWNER, f"s-{n}", [{"role": "user", "text": "I live in Hangzhou", "ts": "2026-12-01T10:00:00Z"}]
        )
        [entry] = wait_for(
            lambda n=n: [
                e
                for e in h.runtime.audit.entries(owner_key=KEY)  # type: ignore[misc]
                if e.session == f"s-{n}"
            ],
            90,
            f"the audit row of s-{n}",
        )
        pids.append(entry.pid)
        kill_group(worker)
    entries = h.runtime.audit.entries(owner_key=KEY)
    assert [(e.session, e.applied, e.reason, e.source) for e in entries] == [
        ("s-2", False, "duplicate", "consolidation"),
        ("s-1", True, None, "consolidation"),
    ]
    assert len(set(pids)) == 2 and all(e.host for e in entries)  # two processes, one trail
    assert not list(tmp_path.rglob("memory-audit.jsonl"))  # no trail left on any host's disk
    # memjobs audit reads the same trail, from anywhere; never the memory text.
    out = cli(hosts[1], "audit", "--owner", OWNER, "--json")
    assert out.code == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["session"] for r in rows] == ["s-2", "s-1"] and rows[1]["owner_key"] == KEY
    assert "Hangzhou" not in out.stdout and OWNER not in out.stdout
    table = cli(hosts[1], "audit", "--source", "consolidation", "--limit", "1")
    assert table.code == 0 and "duplicate" in table.stdout and len(table.stdout.splitlines()) == 2


def test_old_rows_are_pruned_by_the_sweeper(make_settings: MakeSettings, harness_factory: HarnessFactory) -> None:
    h = harness_factory(make_settings(memory_audit_retention_days=7))
    now = datetime.now(UTC)
    clock = [now - timedelta(days=8)]
    old = AuditTrail(h.runtime.db, retention_days=7, clock=lambda: clock[0])
    entry = AuditEntry.of(
        owner_key=KEY, doc="MEMORY.md", op="append", applied=True, reason=None, version=1, context=ChangeContext("cli")
    )
    old.record([entry])
    clock[0] = now - timedelta(days=6)
    old.record([entry])
    assert h.runtime.sweeper.once()["audit_rows_deleted"] == 1
    [kept] = h.runtime.audit.entries()
    assert kept.at is not None and kept.at > now - timedelta(days=7)
    assert h.runtime.sweeper.once()["audit_rows_deleted"] == 0


@pytest.mark.parametrize("doc", ["ASSISTANT.md", "../../etc/passwd"])
def test_a_model_chosen_name_is_never_kept(doc: str) -> None:
    entry = AuditEntry.of(
        owner_key=KEY,
        doc=doc,
        op="delete everything",
        applied=False,
        reason="forbidden_document",
        version=None,
        context=None,
    )
    assert (entry.doc in ("ASSISTANT.md", "other"), entry.op, entry.source) == (True, "other", "unknown")
