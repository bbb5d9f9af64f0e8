"""The ``memjobs`` command line, run the way a user runs it: one subprocess per
command, settings from the environment, answers on stdout (one JSON document
with ``--json``), errors on stderr with a named exit code (workers/cli/exits.py).

The embedded-stack tests share ONE ``memjobs up`` (a module fixture, to pay its
start-up once) and run in file order; each of them sets up what it checks, so a
failure in one does not hide the others. Every process started here is stopped
by the fixtures' finalizers, even on failure: the ``up`` process group gets
SIGTERM then SIGKILL, and any Redis or PostgreSQL still running on a test data
directory gets the same.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from memjobs_client.contracts import QUEUES
from memjobs_worker.cli import exits
from tests.support.cli import (
    HIT_KEYS,
    MEMORY_KEYS,
    PEANUT,
    SECRET,
    SOURCE_KEYS,
    STOP_TIMEOUT_S,
    TEA,
    EmbeddedStack,
    Up,
    accepts_connections,
    alive,
    cli_env,
    demo_model_reply,
    group_alive,
    new_owner,
    ok,
    pids_mentioning,
    run_cli,
    running_stack,
    scratch_dir,
    stop_group,
    stop_leftovers,
)
from tests.support.harness import REPO
from tests.support.openai_server import FakeOpenAI


@pytest.fixture(scope="module")
def stack() -> Iterator[EmbeddedStack]:
    with scratch_dir("up") as base:
        data_dir = base / "data"
        env = cli_env(
            data_dir, MEMJOBS_EXTRACT_DELAY_MS="20", MEMJOBS_SWEEP_INTERVAL_MS="500", MEM0_DIR=str(base / "mem0")
        )
        with running_stack(data_dir, env, "up-1.out") as handle:
            yield handle


# --- without a stack ---------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("status", "--json"),
        ("sources", "--owner", "x"),
        ("sources", "--owner", "x", "--json"),
        ("remember", "--owner", "x", "--text", "hello", "--json"),
        ("drain", "--timeout", "1"),
    ],
)
def test_no_stack_and_no_urls_is_a_config_error_that_says_how_to_start_one(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    result = run_cli(cli_env(tmp_path / "fresh"), *args)
    assert result.code == exits.CONFIG, str(result)
    assert result.stdout == ""
    assert "memjobs up" in result.stderr
    assert "MEMJOBS_REDIS_URL" in result.stderr and "MEMJOBS_DATABASE_URL" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, "one line, not a traceback"


def test_only_the_missing_url_is_named(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "fresh", MEMJOBS_REDIS_URL="redis://127.0.0.1:1/0")
    result = run_cli(env, "status", "--json")
    assert result.code == exits.CONFIG, str(result)
    assert "MEMJOBS_DATABASE_URL" in result.stderr and "MEMJOBS_REDIS_URL" not in result.stderr
    assert "memjobs up" in result.stderr


def test_a_stale_state_file_of_a_dead_stack_is_no_stack(tmp_path: Path) -> None:
    data_dir = tmp_path / "stale"
    gone = subprocess.Popen(["true"])
    gone.wait()
    (data_dir / "run").mkdir(parents=True)
    (data_dir / "run" / "stack.json").write_text(
        json.dumps(
            {
                "pid": gone.pid,
                "redis_url": "redis://127.0.0.1:1/0",
                "database_url": "postgresql://postgres@127.0.0.1:1/postgres",
                "started_at": 0.0,
            }
        )
    )
    result = run_cli(cli_env(data_dir), "status", "--json")
    assert result.code == exits.CONFIG, str(result)
    assert "memjobs up" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("recall", "--owner", "x", "--query", "q", "--limit", "0", "--json"),
        ("recall", "--owner", "x", "--query", "   ", "--json"),
    ],
)
def test_invalid_arguments_are_refused_before_any_backend_is_needed(tmp_path: Path, args: tuple[str, ...]) -> None:
    result = run_cli(cli_env(tmp_path / "fresh"), *args)
    assert result.code == exits.REFUSED, str(result)
    assert result.stdout == ""
    assert "--limit" in result.stderr or "--query" in result.stderr


# --- config ------------------------------------------------------------------------

pytestmark = pytest.mark.slow  # the memjobs command line, run as processes

PG_PASSWORD = "pg-Pa55word-xyz"
REDIS_PASSWORD = "redis-Pa55word-xyz"
API_KEY = "sk-test-secret-value"
EMBEDDING_KEY = "emb-test-secret-value"


def test_config_json_is_one_document_with_secrets_redacted(tmp_path: Path) -> None:
    env = cli_env(
        tmp_path / "data",
        MEMJOBS_DATABASE_URL=f"postgresql://memjobs:{PG_PASSWORD}@db.internal:5432/memjobs",
        MEMJOBS_REDIS_URL=f"redis://:{REDIS_PASSWORD}@cache.internal:6379/0",
        QWEN_AUDIO_MEMORY_API_KEY=API_KEY,
        MEMJOBS_EMBEDDING_API_KEY=EMBEDDING_KEY,
    )
    result = ok(run_cli(env, "config", "--json"))
    doc = result.json()
    for secret in (PG_PASSWORD, REDIS_PASSWORD, API_KEY, EMBEDDING_KEY):
        assert secret not in result.stdout and secret not in result.stderr
    assert doc["model.api_key"] == "[REDACTED]"
    assert doc["embedding.api_key"] == "[REDACTED]"
    # Redacted, not dropped: the rest of each URL is still there to debug with.
    assert doc["database.url"].startswith("postgresql://memjobs:")
    assert "db.internal:5432/memjobs" in doc["database.url"]
    assert "cache.internal:6379" in doc["redis.url"]
    assert doc["data_dir"] == str((tmp_path / "data").resolve())
    assert doc["model_configured"] is True
    assert doc["memory.provider"] == "mem0"

    plain = ok(run_cli(env, "config"))
    for secret in (PG_PASSWORD, REDIS_PASSWORD, API_KEY, EMBEDDING_KEY):
        assert secret not in plain.stdout
    assert "database.url" in plain.stdout


def test_config_redacts_passwords_given_as_url_query_parameters(tmp_path: Path) -> None:
    """libpq and redis-py both accept ``?password=``; config must not print it."""
    env = cli_env(
        tmp_path / "data",
        MEMJOBS_DATABASE_URL=f"postgresql://memjobs@db.internal:5432/memjobs?password={PG_PASSWORD}",
        MEMJOBS_REDIS_URL=f"redis://cache.internal:6379/0?password={REDIS_PASSWORD}",
    )
    result = ok(run_cli(env, "config", "--json"))
    result.json()
    assert PG_PASSWORD not in result.stdout
    assert REDIS_PASSWORD not in result.stdout


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("NOVA_AUDIO_AGENT_MEMORY_PROVIDER", "bogus"),
        ("MEMJOBS_EXTRACT_DELAY_MS", "-1"),
        ("MEMJOBS_WORKER_THREADS", "many"),
    ],
)
def test_invalid_settings_exit_3_naming_the_variable(tmp_path: Path, variable: str, value: str) -> None:
    result = run_cli(cli_env(tmp_path / "data", **{variable: value}), "config")
    assert result.code == exits.CONFIG, str(result)
    assert result.stdout == ""
    assert variable in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, "one line, not a traceback"


# --- configured URLs, no worker (the test session's Redis and PostgreSQL) ---------


def test_with_urls_and_no_worker_work_waits_in_redis_and_drain_times_out(
    tmp_path: Path, redis_url: str, database_url: str
) -> None:
    env = cli_env(tmp_path / "data", MEMJOBS_REDIS_URL=redis_url, MEMJOBS_DATABASE_URL=database_url)
    owner = new_owner("urls")
    doc = ok(run_cli(env, "remember", "--owner", owner, "--text", TEA, "--json")).json()
    assert doc["status"] == "queued" and doc["source_id"].startswith("src_")

    started = time.monotonic()
    status = ok(run_cli(env, "status", "--json")).json()
    baseline_s = time.monotonic() - started  # a command's start-up and reads, on this machine now
    assert status["queues"]["memjobs_remember"]["ready"] == 1
    assert status["pending_sources"] == 0  # not in the ledger until a worker runs

    started = time.monotonic()
    drained = run_cli(env, "drain", "--timeout", "0.5")
    assert drained.code == exits.FAILED, str(drained)
    assert "not drained" in drained.stderr
    # It gave up after its half second: bounded by what a command costs here now (a
    # loaded machine starts Python slowly), not by a constant.
    assert time.monotonic() - started < 3 * baseline_s + 5, (time.monotonic() - started, baseline_s)

    assert ok(run_cli(env, "sources", "--owner", owner, "--json")).json() == []


def test_status_counts_worker_processes_not_producers(tmp_path: Path, redis_url: str, database_url: str) -> None:
    """No worker runs: ``workers`` must be 0 even after a producer enqueued something.

    Dramatiq's Redis broker writes a heartbeat for its broker id on every
    dispatch, enqueues included, so counting ``__heartbeats__`` counts every
    recent producer (CLI, gateway, sweeper) as a live worker.
    """
    env = cli_env(tmp_path / "data", MEMJOBS_REDIS_URL=redis_url, MEMJOBS_DATABASE_URL=database_url)
    assert ok(run_cli(env, "status", "--json")).json()["workers"] == 0
    ok(run_cli(env, "remember", "--owner", new_owner("hb"), "--text", TEA, "--json"))
    assert ok(run_cli(env, "status", "--json")).json()["workers"] == 0


def test_refusals_exit_4_with_a_json_reason_and_enqueue_nothing(
    tmp_path: Path, redis_url: str, database_url: str
) -> None:
    env = cli_env(tmp_path / "data", MEMJOBS_REDIS_URL=redis_url, MEMJOBS_DATABASE_URL=database_url)
    owner = new_owner("refuse")
    secret = run_cli(env, "remember", "--owner", owner, "--text", SECRET, "--json")
    assert secret.code == exits.REFUSED, str(secret)
    doc = secret.json()
    assert doc["status"] == "refused" and doc["reason"] == "sensitive_content"
    assert doc["source_id"] is None
    assert "hunter2" not in secret.stdout + secret.stderr

    off = run_cli(
        {**env, "NOVA_AUDIO_AGENT_MEMORY_PROVIDER": "off"}, "remember", "--owner", owner, "--text", TEA, "--json"
    )
    assert off.code == exits.REFUSED, str(off)
    assert off.json()["reason"] == "memory_off"

    bad = run_cli(env, "forget", "--owner", owner, "--source", "not-a-source-id", "--json")
    assert bad.code == exits.REFUSED, str(bad)

    queues = ok(run_cli(env, "status", "--json")).json()["queues"]
    assert all(q["ready"] == 0 and q["delayed"] == 0 for q in queues.values()), queues


# --- the embedded stack ------------------------------------------------------------


@pytest.mark.slow
def test_remember_learn_recall_forget_through_the_cli(stack: EmbeddedStack) -> None:
    owner = new_owner("alice")
    first = stack.cli("remember", "--owner", owner, "--text", PEANUT, "--json")
    assert first.code == exits.OK, str(first)
    doc = first.json()
    assert set(doc) == {"source_id", "status"} and doc["status"] == "queued"
    peanut = doc["source_id"]
    assert re.fullmatch(r"src_[0-9a-f]{32}", peanut), peanut
    assert stack.json("remember", "--owner", owner, "--text", PEANUT) == doc
    tea = stack.remember(owner, TEA)
    assert tea != peanut

    refused = stack.cli("remember", "--owner", owner, "--text", SECRET, "--json")
    assert refused.code == exits.REFUSED, str(refused)
    assert refused.json()["status"] == "refused"
    assert refused.json()["reason"] == "sensitive_content"
    assert "hunter2" not in refused.stdout + refused.stderr

    stack.drain()

    listing = stack.json("sources", "--owner", owner)
    assert isinstance(listing, list) and len(listing) == 2, listing
    assert all(set(s) == SOURCE_KEYS for s in listing), listing
    assert {s["source_id"]: s["state"] for s in listing} == {peanut: "learned", tea: "learned"}
    for s in listing:
        assert datetime.fromisoformat(s["learned_at"]) >= datetime.fromisoformat(s["created_at"])
    with_text = stack.json("sources", "--owner", owner, "--show-text")
    assert all(set(s) == SOURCE_KEYS | {"text"} for s in with_text), with_text
    assert {s["source_id"]: s["text"] for s in with_text} == {peanut: PEANUT, tea: TEA}

    memories = stack.json("memories", "--owner", owner)
    assert all(set(m) == MEMORY_KEYS for m in memories), memories
    assert sorted((m["text"], tuple(m["source_ids"])) for m in memories) == sorted([(PEANUT, (peanut,)), (TEA, (tea,))])

    hits = stack.json("recall", "--owner", owner, "--query", "花生")
    assert all(set(h) == HIT_KEYS for h in hits), hits
    assert [h["source_ids"] for h in hits if h["text"] == PEANUT] == [[peanut]], hits
    assert all(isinstance(h["score"], float) for h in hits)

    stranger = new_owner("mallory")
    assert stack.json("sources", "--owner", stranger) == []
    assert stack.json("recall", "--owner", stranger, "--query", "花生") == []

    assert stack.json("forget", "--owner", owner, "--source", peanut) == {
        "source_id": peanut,
        "status": "forgotten",
        "purge": "queued",
    }
    # Forgotten at once, as the HTTP API's forget: recall no longer returns it, before the purge.
    assert all(peanut not in h["source_ids"] for h in stack.json("recall", "--owner", owner, "--query", "花生")), (
        "still recalled"
    )
    stack.drain()
    hits = stack.json("recall", "--owner", owner, "--query", "花生")
    assert all(h["text"] != PEANUT and peanut not in h["source_ids"] for h in hits), hits
    assert stack.states(owner) == {peanut: "forgotten", tea: "learned"}
    texts = {s["source_id"]: s["text"] for s in stack.json("sources", "--owner", owner, "--show-text")}
    assert texts == {peanut: None, tea: TEA}
    assert [m["text"] for m in stack.json("memories", "--owner", owner)] == [TEA]


@pytest.mark.slow
def test_status_and_sweep_json(stack: EmbeddedStack) -> None:
    stack.remember(new_owner("status"), "I walk the dog at seven")
    stack.drain()
    status = stack.json("status")
    assert set(status["queues"]) == set(QUEUES)
    for name, queue in status["queues"].items():
        assert {"ready", "delayed", "dead"} <= set(queue), (name, queue)
        assert queue["ready"] == 0 and queue["delayed"] == 0 and queue["dead"] == 0
    assert status["pending_sources"] == 0
    assert status["workers"] >= 1
    assert stack.json("sweep") == {
        "owners_requeued": 0,
        "digests_deleted": 0,
        "tasks_deleted": 0,
        "session_runs_deleted": 0,
        "audit_rows_deleted": 0,
        "blackboard_entries_deleted": 0,
        "attempts_deleted": 0,
    }


@pytest.mark.slow
def test_worker_log_is_json_and_carries_no_text_or_owner_id(stack: EmbeddedStack) -> None:
    owner = new_owner("logs")
    sid = stack.remember(owner, "我住在杭州西湖边")
    assert stack.cli("remember", "--owner", owner, "--text", SECRET, "--json").code == exits.REFUSED
    stack.drain()
    ok(stack.cli("forget", "--owner", owner, "--source", sid, "--json"))
    stack.drain()

    log_path = stack.data_dir / "logs" / "worker.log"
    content = log_path.read_text(encoding="utf-8")
    records = []
    for number, line in enumerate(content.splitlines(), 1):
        if line.strip().startswith("{"):
            record = json.loads(line)
            assert isinstance(record, dict), (number, line)
            assert {"ts", "level", "logger", "msg"} <= set(record), (number, line)
            records.append(record)
    assert any(r["logger"].startswith("memjobs") for r in records), "no memjobs record logged"

    up_output = stack.up.text()
    needles = stack.texts | stack.owners  # every text and owner said to this stack so far
    assert {owner, SECRET, "我住在杭州西湖边"} <= needles
    for needle in sorted(needles):
        assert needle not in content, f"{needle!r} is in {log_path}"
        assert needle not in up_output, f"{needle!r} is in the output of memjobs up"


_PLAIN_RECORD = re.compile(r"^\[[^\]]+\] \[PID \d+\] \[[^\]]*\] \[(?P<logger>[^\]]+)\] \[[A-Z]+\] ")


@pytest.mark.slow
def test_worker_log_has_no_unredacted_plain_copies_of_records(stack: EmbeddedStack) -> None:
    """memjobs' and mem0's records reach the log only through the redacting JSON
    formatter: Dramatiq's own plain-text handler would write each of them again,
    messages and tracebacks unredacted and mem0's messages unsuppressed."""
    stack.remember(new_owner("plain"), "I collect old maps")
    stack.drain()
    content = (stack.data_dir / "logs" / "worker.log").read_text(encoding="utf-8")
    plain = [
        line
        for line in content.splitlines()
        if (m := _PLAIN_RECORD.match(line)) and m["logger"].startswith(("memjobs", "mem0"))
    ]
    assert plain == [], f"{len(plain)} plain-text records, e.g. {plain[:3]}"


@pytest.mark.slow
def test_sigterm_stops_everything_and_data_survives_a_restart(stack: EmbeddedStack) -> None:
    owner = new_owner("persist")
    sid = stack.remember(owner, "我住在杭州西湖边的小区")
    stack.drain()
    before = stack.json("sources", "--owner", owner)
    assert [(s["source_id"], s["state"]) for s in before] == [(sid, "learned")]

    first = stack.up
    info = json.loads(first.stack_file.read_text())
    redis_port = urlsplit(info["redis_url"]).port
    pg_port = urlsplit(info["database_url"]).port
    assert redis_port and pg_port
    token = uuid.uuid4().hex
    probe = redis.Redis.from_url(info["redis_url"])
    probe.set("cli-test:aof-probe", token)
    probe.close()

    first.proc.send_signal(signal.SIGTERM)
    assert first.proc.wait(timeout=STOP_TIMEOUT_S) == 0, first.text()
    assert "memjobs stopped" in first.text()
    assert not first.stack_file.exists()
    assert not accepts_connections(redis_port), "embedded Redis still listening"
    assert not accepts_connections(pg_port), "embedded PostgreSQL still listening"
    assert not (stack.data_dir / "postgres" / "postmaster.pid").exists()
    assert not group_alive(first.proc.pid), "a worker process outlived memjobs up"
    assert [p for p in pids_mentioning(str(stack.data_dir)) if alive(p)] == []
    stopped = stack.cli("status", "--json")
    assert stopped.code == exits.CONFIG and "memjobs up" in stopped.stderr, str(stopped)

    second = stack.start("up-2.out")
    assert stack.json("sources", "--owner", owner) == before
    hits = stack.json("recall", "--owner", owner, "--query", "杭州")
    assert [h["source_ids"] for h in hits] == [[sid]], hits
    info = json.loads(second.stack_file.read_text())
    probe = redis.Redis.from_url(info["redis_url"])
    assert probe.get("cli-test:aof-probe") == token.encode()
    probe.close()

    os.killpg(second.proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the group
    assert second.proc.wait(timeout=STOP_TIMEOUT_S) == 0, second.text()
    assert not second.stack_file.exists()
    assert not accepts_connections(urlsplit(info["redis_url"]).port or 0)
    assert not accepts_connections(urlsplit(info["database_url"]).port or 0)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="PostgreSQL runs as a separate user only as root")
def test_up_never_reports_a_clean_stop_while_its_postgres_keeps_running() -> None:
    """Root runs the embedded PostgreSQL as a system user. If that user loses
    access to the data directory while the stack runs (here: a parent directory
    becomes 0700, as pytest does to /tmp/pytest-of-root), ``pg_ctl status``
    fails and ``memjobs up`` must still stop the server, or at least say it
    could not and exit non-zero, not print "memjobs stopped" and exit 0 with
    PostgreSQL orphaned."""
    with scratch_dir("fault") as base:
        outer = base / "outer"
        outer.mkdir()
        data_dir = outer / "data"
        up = Up(data_dir, cli_env(data_dir, MEM0_DIR=str(base / "mem0")), base / "up.out")
        try:
            up.wait_ready()
            info = json.loads(up.stack_file.read_text())
            pg_port = urlsplit(info["database_url"]).port
            assert pg_port
            outer.chmod(0o700)
            up.proc.send_signal(signal.SIGTERM)
            code = up.proc.wait(timeout=STOP_TIMEOUT_S)
            still_listening = accepts_connections(pg_port)
        finally:
            up.close()
        assert not still_listening or (code != exits.OK and "PostgreSQL" in up.text()), (
            f"memjobs up exited {code} and left PostgreSQL on port {pg_port}:\n{up.text()}"
        )


# --- demo --------------------------------------------------------------------------


def _section(stdout: str, n: int) -> str:
    start = stdout.index(f"[{n}] ")
    end = stdout.find(f"[{n + 1}] ", start)
    return stdout[start:] if end < 0 else stdout[start:end]


@pytest.mark.slow
def test_demo_runs_the_scenario_on_a_fresh_data_dir() -> None:
    with scratch_dir("demo") as base:
        data_dir = base / "data"
        env = cli_env(data_dir, MEMJOBS_EXTRACT_DELAY_MS="20", MEM0_DIR=str(base / "mem0"))
        del env["MEMJOBS_KNOWLEDGE"]  # off by default: the demo turns it on for its own stack
        del env["MEMJOBS_LOCAL_EMBEDDER"]  # the default, the local model: step [5] asks in other words
        proc = subprocess.Popen(
            [sys.executable, "-m", "memjobs_worker.cli.main", "demo"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                stop_group(proc)
            leftovers = stop_leftovers(data_dir)
        state_file_left = (data_dir / "run" / "stack.json").exists()
        from tests.support.cli import assert_owner_only

        assert_owner_only(data_dir)
    assert proc.returncode == exits.OK, f"stdout:\n{stdout}\nstderr:\n{stderr[-3000:]}"
    for n in range(1, 12):
        assert f"[{n}] " in stdout, f"step {n} missing:\n{stdout}"
    assert "Tea notes: Longjing" in _section(stdout, 10)  # knowledge, turned on by the demo
    assert "skipped" in _section(stdout, 9)  # no model endpoint: no consolidation
    assert "same id: True" in _section(stdout, 2)
    assert "refused: sensitive_content" in _section(stdout, 3)
    assert "Tr0ub4dor" not in stdout + stderr
    assert "UNEXPECTED" not in stdout
    assert "learned" in _section(stdout, 4)
    assert "我对花生过敏" in _section(stdout, 5)  # asked "what am I allergic to?"
    assert "My daughter's birthday is on March 3rd." in _section(stdout, 5)  # asked in Chinese
    assert "forgotten" in _section(stdout, 6)
    assert "我对花生过敏" not in _section(stdout, 7)
    assert "short answers" in _section(stdout, 8).split("\n", 1)[1]
    assert leftovers == [], "the demo left its Redis or PostgreSQL running"
    assert not state_file_left


@pytest.mark.slow
def test_demo_ends_the_session_when_a_model_endpoint_is_configured(fake_model: FakeOpenAI) -> None:
    fake_model.set_chat_handler(demo_model_reply)
    with scratch_dir("demo-model") as base:
        data_dir = base / "data"
        env = cli_env(
            data_dir,
            MEMJOBS_EXTRACT_DELAY_MS="20",
            MEM0_DIR=str(base / "mem0"),
            QWEN_AUDIO_MEMORY_BASE_URL=fake_model.base_url,
            QWEN_AUDIO_MEMORY_API_KEY="k",
        )
        try:
            result = subprocess.run(
                [sys.executable, "-m", "memjobs_worker.cli.main", "demo"],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=240,
            )
        finally:
            stop_leftovers(data_dir)
    assert result.returncode == exits.OK, result.stdout + result.stderr[-3000:]
    section = _section(result.stdout, 9)
    assert "MEMORY.md (version 1)" in section and "- 对花生过敏" in section
