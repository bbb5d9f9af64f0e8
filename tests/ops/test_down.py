"""``memjobs down``: it stops the data directory's stack and waits until every
process ``up`` started is gone; with no stack it says so; after ``kill -9`` of
``up``, ``status`` and ``check`` name what was left running and ``down`` stops it.

The first stack also starts with the default metrics port held by another
process, so it checks that the metrics move to a free port (as the API's
port does), and that the ``up`` terminal carries only the banner, the notices
and the stop (the API server's and the sweeper's records go to the log file).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from memjobs_worker.cli import exits
from memjobs_worker.embedded.leftovers import postmaster_pid
from memjobs_worker.embedded.process import group_members
from memjobs_worker.settings import default_of
from tests.support.cli import Up, alive, cli_env, pids_mentioning, run_cli, scratch_dir
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow

DEFAULT_METRICS_PORT = default_of("metrics.port")


def state(data_dir: Path) -> dict[str, Any]:
    return dict(json.loads((data_dir / "run" / "stack.json").read_text()))


def scraped(url: str) -> bytes:
    """The metrics page, or nothing while the workers' endpoint does not listen yet
    (a live worker's heartbeat can come before its metrics server)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return bytes(reply.read())
    except OSError:
        return b""


def started_processes(data_dir: Path, up: Up) -> list[int]:
    """Every process of the stack: ``up``, the workers' group, Redis, PostgreSQL."""
    info = state(data_dir)
    pids = {up.proc.pid, *group_members(info["worker_pid"]), info["redis_pid"]}
    pids |= {postmaster_pid(data_dir / "postgres") or 0} - {0}
    pids |= set(pids_mentioning(str(data_dir)))
    # One process on a small host (the pools share it), Dramatiq's main and workers elsewhere.
    assert group_members(info["worker_pid"]), "the workers' process group"
    return sorted(pids)


@contextmanager
def default_metrics_port_taken() -> Iterator[None]:
    """Hold the default metrics port (unless another stack on this machine already does)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        try:
            sock.bind(("127.0.0.1", DEFAULT_METRICS_PORT))
            sock.listen()
        except OSError:
            pass  # taken already: just as good
        yield
    finally:
        sock.close()


def test_down_without_a_stack_says_so(tmp_path: Path) -> None:
    result = run_cli(cli_env(tmp_path / "data"), "down")
    assert result.code == exits.NOT_FOUND, str(result)
    assert "no memjobs stack is running" in result.stderr and "nothing to stop" in result.stderr
    assert result.stdout == ""


def test_down_stops_the_stack_and_every_process_it_started() -> None:
    with scratch_dir("down") as base, default_metrics_port_taken():
        data_dir = base / "data"
        env = cli_env(data_dir, MEM0_DIR=str(base / "mem0"))
        up = Up(data_dir, env, base / "up.out")
        try:
            up.wait_ready()
            # A taken default metrics port moves, like the API's: said, recorded, served.
            metrics_url = state(data_dir)["metrics_url"]
            assert metrics_url and f":{DEFAULT_METRICS_PORT}/" not in metrics_url, up.text()
            # up writes the state file before it prints the notice and the banner
            wait_for(lambda: "memjobs is up" in up.text(), 30, "the banner")
            assert f"port {DEFAULT_METRICS_PORT} is taken" in up.text()
            banner = next(line for line in up.text().splitlines() if line.startswith("memjobs is up"))
            assert f"metrics {metrics_url}" in banner
            assert run_cli(env, "url", "--metrics").stdout.strip() == metrics_url
            assert run_cli(env, "url").stdout.strip() == state(data_dir)["api_url"]
            wait_for(lambda: b"memjobs_" in scraped(metrics_url), 60, "the moved metrics endpoint")

            pids = started_processes(data_dir, up)
            down = run_cli(env, "down")
            assert down.code == exits.OK, str(down)
            assert "stopped" in down.stdout
            up.proc.wait(10)  # down returned once up had exited: only its exit status is left
            assert [pid for pid in pids if alive(pid)] == []
            assert pids_mentioning(str(data_dir)) == []
            assert not (data_dir / "run" / "stack.json").exists()
            out = up.text()
            assert out.rstrip().endswith("memjobs stopped (SIGTERM)"), out
            # The terminal: the banner, the notices and the stop; no server log lines.
            assert [line for line in out.splitlines() if not line.startswith("memjobs")] == [], out
            log = (data_dir / "logs" / "worker.log").read_text()
            assert "uvicorn" in log and "color_message" not in log and "\x1b[" not in log

            again = run_cli(env, "down")
            assert again.code == exits.NOT_FOUND, str(again)
        finally:
            up.close()


def test_leftovers_of_a_killed_up_are_reported_then_stopped_by_down() -> None:
    with scratch_dir("down-kill9") as base:
        data_dir = base / "data"
        env = cli_env(data_dir, MEM0_DIR=str(base / "mem0"))
        up = Up(data_dir, env, base / "up.out")
        try:
            up.wait_ready()
            pids = started_processes(data_dir, up)
            os.kill(up.proc.pid, signal.SIGKILL)
            up.proc.wait(10)
            left = [pid for pid in pids if alive(pid)]
            assert left, "kill -9 of up left nothing running: nothing to test"

            for command in ("status", "check"):
                result = run_cli(env, command)
                assert result.code == exits.CONFIG, str(result)
                said = result.stderr
                assert "left" in said and "memjobs down" in said, said
                assert "the workers (pid" in said and "Redis (pid" in said and "PostgreSQL (pid" in said
                assert len(said.strip().splitlines()) == 1, said

            down = run_cli(env, "down")
            assert down.code == exits.OK, str(down)
            assert "left by a previous memjobs up" in down.stdout
            assert [pid for pid in pids if alive(pid)] == []
            assert pids_mentioning(str(data_dir)) == []

            after = run_cli(env, "status")
            assert after.code == exits.CONFIG and "left" not in after.stderr, str(after)
        finally:
            up.close()
