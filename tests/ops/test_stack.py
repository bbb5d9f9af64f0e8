"""The embedded stack as a newcomer meets it: one stack per data directory, a
clean stop on every signal (and after a crash of ``up`` itself), owner-only
files with no forgotten text left in them, JSON-only logs, a metrics port
another process holds, and commands that say what is left.

Most tests share ONE ``memjobs up`` (module fixture) whose light model is the
scripted stand-in and whose metrics port is held by the test, so every start
also checks the bind-failure path. Tests run in file order; each sets up what
it checks.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from memjobs_worker.cli import exits
from tests.support.cli import (
    STOP_TIMEOUT_S,
    Result,
    Up,
    accepts_connections,
    alive,
    assert_owner_only,
    cli_env,
    demo_model_reply,
    new_owner,
    ok,
    pids_mentioning,
    run_cli,
    scratch_dir,
)
from tests.support.harness import REPO
from tests.support.openai_server import FakeOpenAI, echo_facts_handler
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow


def held_port() -> socket.socket:
    """A listening socket on a free loopback port: "another process holds it"."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def state(data_dir: Path) -> dict[str, Any]:
    return dict(json.loads((data_dir / "run" / "stack.json").read_text()))


def files_under(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()]


def holding(needle: str, *roots: Path) -> list[Path]:
    raw = needle.encode()
    found = []
    for path in files_under(*roots):
        try:
            if raw in path.read_bytes():
                found.append(path)
        except OSError:
            continue
    return found


@dataclass
class Shared:
    data_dir: Path
    env: dict[str, str]
    up: Up
    model: FakeOpenAI
    metrics_port: int

    def cli(self, *args: str) -> Result:
        return run_cli(self.env, *args)

    def json(self, *args: str) -> Any:
        return ok(self.cli(*args, "--json")).json()

    @property
    def log_text(self) -> str:
        return "".join(p.read_text(encoding="utf-8") for p in sorted((self.data_dir / "logs").glob("worker.log*")))


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    taken = held_port()
    with scratch_dir("stack") as base, FakeOpenAI(embedding_dims=64) as model:
        model.set_chat_handler(echo_facts_handler)
        data_dir = base / "data"
        env = cli_env(
            data_dir,
            MEMJOBS_EXTRACT_DELAY_MS="20",
            MEMJOBS_SWEEP_INTERVAL_MS="300",
            MEM0_DIR=str(base / "mem0"),
            MEMJOBS_METRICS_PORT=str(taken.getsockname()[1]),
            QWEN_AUDIO_MEMORY_BASE_URL=model.base_url,
            QWEN_AUDIO_MEMORY_API_KEY="k",
            MEMJOBS_MODEL_MAX_ATTEMPTS="1",
            MEMJOBS_MIN_BACKOFF_MS="300",
            MEMJOBS_MAX_BACKOFF_MS="1500",
            MEMJOBS_KNOWLEDGE_MAX_FILE_BYTES="1000",
            MEMJOBS_MAX_RETRIES="1000",  # a scripted outage retries until it ends
            # the tests' folders are the roots a reindex may read under
            MEMJOBS_KNOWLEDGE_ROOTS=str(tmp_path_factory.getbasetemp()),
        )
        up = Up(data_dir, env, base / "up.out")
        try:
            up.wait_ready()
            yield Shared(data_dir, env, up, model, taken.getsockname()[1])
        finally:
            up.close()
            taken.close()


# --- one stack per data directory ------------------------------------------------------


def test_a_second_up_is_refused_and_leaves_the_running_stack_alone(shared: Shared) -> None:
    before = state(shared.data_dir)
    second = run_cli(shared.env, "up", timeout=STOP_TIMEOUT_S)
    assert second.code == exits.FAILED, str(second)
    assert "already running" in second.stderr and f"pid {before['pid']}" in second.stderr
    assert state(shared.data_dir) == before, "the second up changed the running stack's state file"
    owner = new_owner("twice")
    sid = shared.json("remember", "--owner", owner, "--text", "I water the plants on Sunday")["source_id"]
    ok(shared.cli("drain", "--timeout", "60"))
    assert {s["source_id"]: s["state"] for s in shared.json("sources", "--owner", owner)} == {sid: "learned"}


def test_a_taken_metrics_port_is_one_warning_and_no_traceback(shared: Shared) -> None:
    out = shared.up.text()
    warnings = [line for line in out.splitlines() if "cannot be bound" in line]
    assert len(warnings) == 1, out
    assert str(shared.metrics_port) in warnings[0] and "MEMJOBS_METRICS_PORT" in warnings[0]
    banner = next(line for line in out.splitlines() if line.startswith("memjobs is up"))
    assert "metrics off" in banner
    assert state(shared.data_dir)["metrics_url"] is None
    log = shared.log_text
    assert "Address already in use" not in log and "Traceback" not in log
    assert sum("metrics endpoint not served" in line for line in log.splitlines()) == 1


def test_metrics_bind_failure_can_be_a_start_up_error() -> None:
    taken = held_port()
    with scratch_dir("metrics-fail") as base:
        env = cli_env(
            base / "data", MEMJOBS_METRICS_PORT=str(taken.getsockname()[1]), MEMJOBS_METRICS_BIND_FAILURE="fail"
        )
        try:
            result = run_cli(env, "up", timeout=STOP_TIMEOUT_S)
        finally:
            taken.close()
        assert result.code == exits.CONFIG, str(result)
        assert "cannot be bound" in result.stderr and "Traceback" not in result.stderr
        assert pids_mentioning(str(base / "data")) == [], "servers started before the refusal"
        assert not (base / "data" / "run" / "stack.json").exists()


# --- private files, forgotten text -----------------------------------------------------


def test_a_forgotten_text_leaves_the_redis_files_mem0_and_the_logs(shared: Shared) -> None:
    owner = new_owner("purge")
    text = f"My locker code word is heliotrope {uuid.uuid4().hex[:8]}"
    sid = shared.json("remember", "--owner", owner, "--text", text)["source_id"]
    ok(shared.cli("drain", "--timeout", "60"))
    redis_dir, mem0_dir, logs = (shared.data_dir / d for d in ("redis", "mem0", "logs"))
    assert holding(text, redis_dir), "the grep would not see the text in Redis's files"
    assert shared.json("forget", "--owner", owner, "--source", sid)["status"] == "forgotten"
    ok(shared.cli("drain", "--timeout", "60"))
    assert [s["state"] for s in shared.json("sources", "--owner", owner)] == ["forgotten"]
    deadline = time.monotonic() + 60
    mem0_home = Path(shared.env["MEM0_DIR"])  # mem0's own directory (~/.mem0), outside the data directory
    while (left := holding(text, redis_dir, mem0_dir, mem0_home, logs)) and time.monotonic() < deadline:
        time.sleep(0.2)  # the sweeper's batched append-only rewrite: polled, with a deadline
    assert left == [], f"the forgotten text is still in {left}"
    assert text not in shared.up.text()


def test_the_data_directory_is_owner_only(shared: Shared) -> None:
    assert_owner_only(shared.data_dir)


# --- drain, logs ------------------------------------------------------------------------


def test_drain_says_which_job_is_retrying_and_ctrl_c_exits_130(shared: Shared) -> None:
    # A refused request (400: model_rejected) is retried by count, which drain lists;
    # a model outage (5xx) waits on the outage budget behind the breaker instead.
    shared.model.fail_next("chat", 400, count=100_000)
    try:
        owner = new_owner("retry")
        shared.json("remember", "--owner", owner, "--text", "I keep bees in the garden")
        deadline = time.monotonic() + 90
        while True:
            report = shared.cli("drain", "--timeout", "1")
            if "retrying extract_facts" in report.stderr or time.monotonic() > deadline:
                break
        assert report.code == exits.FAILED, str(report)
        assert "not drained after 1 s" in report.stderr
        retrying = [line for line in report.stderr.splitlines() if "retrying extract_facts" in line]
        assert retrying, str(report)
        assert "memjobs_extract" in retrying[0] and "attempt" in retrying[0]
        assert "model_rejected" in retrying[0], retrying[0]  # the last failure's reason
        assert "bees" not in report.stderr
        listing = json.loads(shared.cli("drain", "--timeout", "0.2", "--json").stdout)
        assert listing["drained"] is False and listing["left"]["retrying"]

        # On a terminal (a pseudo-terminal here) drain shows its progress; once it
        # does, Ctrl-C.
        leader, follower = os.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "memjobs_worker.cli.main", "drain", "--timeout", "300"],
            cwd=REPO,
            env=shared.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=follower,
        )
        os.close(follower)
        seen = b""
        try:
            while b"retrying: " not in seen:
                ready, _, _ = select.select([leader], [], [], 120)
                assert ready, f"no progress shown: {seen!r}"
                seen += os.read(leader, 4096)
            assert b"draining" in seen and b"pending sources" in seen, seen
            proc.send_signal(signal.SIGINT)
            assert proc.wait(60) == exits.INTERRUPTED == 130
            try:
                while chunk := os.read(leader, 4096):
                    seen += chunk
            except OSError:  # the terminal's other side is closed: all read
                pass
        finally:
            os.close(leader)
            if proc.poll() is None:
                proc.kill()
        assert b"drain interrupted" in seen and b"retrying extract_facts" in seen, seen
    finally:
        shared.model.reset()
        shared.model.set_chat_handler(echo_facts_handler)
    ok(shared.cli("drain", "--timeout", "90"))


def test_the_worker_log_is_json_lines_after_model_failures(shared: Shared) -> None:
    lines = shared.log_text.splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        record = json.loads(line)  # every line, not only those that look like JSON
        assert isinstance(record, dict) and {"ts", "level", "logger", "msg"} <= set(record), (number, line)
        records.append(record)
    assert any(r["logger"].startswith("dramatiq") for r in records), "Dramatiq's records are missing"
    assert any("exc" in r for r in records), "no failure with its traceback as a field"
    assert not any(r["msg"].startswith("HTTP Request:") for r in records), "httpx logs at INFO"


# --- commands that say what they did -----------------------------------------------------


def test_status_prints_a_table(shared: Shared) -> None:
    out = ok(shared.cli("status")).stdout.splitlines()
    assert out[0].split() == ["queue", "ready", "delayed", "in_flight", "dead"]
    assert any(line.split()[0] == "memjobs_remember" and len(line.split()) == 5 for line in out)
    assert any(line.startswith("live workers: ") for line in out)
    assert not any(line.lstrip().startswith("{") for line in out)


def test_forget_of_an_unknown_source_is_not_found(shared: Shared) -> None:
    owner = new_owner("unknown")
    result = shared.cli("forget", "--owner", owner, "--source", "src_" + "0" * 32, "--json")
    assert result.code == exits.NOT_FOUND == 6, str(result)
    assert result.json()["status"] == "not_found"
    sid = shared.json("remember", "--owner", owner, "--text", "I run on Tuesdays")["source_id"]
    assert shared.json("forget", "--owner", owner, "--source", sid)["status"] == "forgotten"
    ok(shared.cli("drain", "--timeout", "60"))
    assert shared.json("forget", "--owner", owner, "--source", sid)["status"] == "already_forgotten"


def test_end_session_and_sessions_say_what_is_switched_off(shared: Shared, tmp_path: Path) -> None:
    owner = new_owner("session")
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps([{"role": "user", "text": "call me Lin", "ts": "2026-11-29T10:00:00Z"}]))
    ended = shared.json("end-session", "--owner", owner, "--session", "s-1", "--transcript", str(transcript))
    assert "consolidate_session" in ended["enqueued"]
    assert [(o["job"], "QWEN_AUDIO_SESSION_DIGEST" in o["why"]) for o in ended["switched_off"]] == [
        ("digest_session", True)
    ]
    text = ok(shared.cli("end-session", "--owner", owner, "--session", "s-2", "--transcript", str(transcript)))
    assert "digest_session is switched off" in text.stdout
    sessions = shared.cli("sessions", "--owner", owner, "--json")
    assert sessions.json() == [] and "digests are switched off" in sessions.stderr
    ok(shared.cli("drain", "--timeout", "90"))


def test_memory_replace_of_a_missing_text_is_not_found(shared: Shared) -> None:
    owner = new_owner("replace")
    ok(shared.cli("memory", "append", "--owner", owner, "--doc", "MEMORY.md", "--text", "- Likes jasmine tea"))
    result = shared.cli(
        "memory", "replace", "--owner", owner, "--doc", "MEMORY.md", "--old", "oolong", "--new", "jasmine", "--json"
    )
    assert result.code == exits.NOT_FOUND, str(result)
    assert result.json()["reason"] == "not_found"


def test_reindex_of_nothing_is_refused_and_counts_are_said(shared: Shared, tmp_path: Path) -> None:
    owner = new_owner("reindex")
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = shared.cli("reindex", "--owner", owner, "--path", str(empty), "--consent", "--json")
    assert refused.code == exits.REFUSED, str(refused)
    assert "--allow-empty" in refused.stderr and refused.stdout == ""
    no_consent = shared.cli("reindex", "--owner", owner, "--path", str(empty))
    assert no_consent.code == exits.REFUSED and "--consent" in no_consent.stderr
    assert "consent=True" not in no_consent.stderr
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "tea.md").write_text("I like green tea with jasmine.")
    (notes / "long.md").write_text("Oolong. " * 200)  # over MEMJOBS_KNOWLEDGE_MAX_FILE_BYTES=1000
    first = shared.json("reindex", "--owner", owner, "--path", str(notes), "--consent")
    assert (first["add"], first["replace"], first["delete"]) == (2, 0, 0)
    ok(shared.cli("drain", "--timeout", "60"))
    listed = {d["title"]: d for d in shared.json("knowledge", "list", "--owner", owner)}
    assert listed["long.md"]["reason"] == "too_large"
    assert "MEMJOBS_KNOWLEDGE_MAX_FILE_BYTES=1000" in listed["long.md"]["limit"]
    assert listed["tea.md"]["limit"] is None
    allowed = shared.json("reindex", "--owner", owner, "--path", str(empty), "--consent", "--allow-empty")
    assert (allowed["documents"], allowed["delete"]) == (0, 2)
    ok(shared.cli("drain", "--timeout", "60"))


def test_the_demo_beside_a_running_stack_waits_only_for_its_own_work(shared: Shared) -> None:
    stuck = f"stuck-{uuid.uuid4().hex[:8]}"

    def reply(request: dict[str, Any]) -> str:
        if stuck in json.dumps(request, ensure_ascii=False):
            raise RuntimeError("scripted outage for one owner's extraction")
        return demo_model_reply(request)

    shared.model.set_chat_handler(reply)
    try:
        other = new_owner("busy")
        sid = shared.json("remember", "--owner", other, "--text", f"I keep {stuck} notes")["source_id"]
        demo = run_cli(shared.env, "demo", timeout=240)
        assert demo.code == exits.OK, str(demo)
        assert "[0] using the running memjobs stack" in demo.stdout
        assert "MEMORY.md (version 1)" in demo.stdout
        # the other owner's work was never done: a drain of the whole stack would have waited for it
        assert {s["source_id"]: s["state"] for s in shared.json("sources", "--owner", other)} == {sid: "pending"}
    finally:
        shared.model.reset()
        shared.model.set_chat_handler(echo_facts_handler)
    ok(shared.cli("drain", "--timeout", "90"))


# --- signals, crashes -----------------------------------------------------------------------


def test_a_crashed_up_leaves_nothing_the_next_up_does_not_stop_and_sighup_stops_all() -> None:
    with scratch_dir("crash") as base:
        data_dir = base / "data"
        env = cli_env(data_dir, MEM0_DIR=str(base / "mem0"), MEMJOBS_METRICS_PORT="0")
        first = Up(data_dir, env, base / "up-1.out")
        second: Up | None = None
        try:
            first.wait_ready()
            old = state(data_dir)
            os.kill(first.proc.pid, signal.SIGKILL)  # `up` alone: its servers and workers live on
            first.proc.wait(STOP_TIMEOUT_S)
            assert alive(old["worker_pid"]) and alive(old["redis_pid"])

            second = Up(data_dir, env, base / "up-2.out")
            second.wait_ready()
            # the old workers' heartbeats may make status count them a moment
            wait_for(lambda: "memjobs is up" in second.text(), STOP_TIMEOUT_S, "the second up's banner", poll_s=0.1)
            assert "left by a previous memjobs up" in second.text(), second.text()
            assert not alive(old["worker_pid"]) and not alive(old["redis_pid"])
            new = state(data_dir)

            os.killpg(second.proc.pid, signal.SIGHUP)  # the terminal closed
            assert second.proc.wait(STOP_TIMEOUT_S) == exits.OK, second.text()
            assert "memjobs stopped (SIGHUP)" in second.text()
            assert not (data_dir / "run" / "stack.json").exists()
            for pid in (new["worker_pid"], new["redis_pid"]):
                assert not alive(pid), f"pid {pid} outlived memjobs up"
            assert not accepts_connections(urlsplit(new["redis_url"]).port or 0)
            assert not accepts_connections(urlsplit(new["database_url"]).port or 0)
            assert [p for p in pids_mentioning(str(data_dir)) if alive(p)] == []
        finally:
            for up in (first, second):
                if up is not None:
                    up.close()
