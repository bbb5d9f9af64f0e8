"""Progress and honest endings, without a server: the progress reports of
drain, reembed and down (what remains, the rate, the time left; a line in
place on a terminal, plain lines in a pipe, JSON lines with ``--json``), and
``memjobs down`` saying when the stop it waited for was forced.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from memjobs_worker.cli import exits
from memjobs_worker.cli.progress import Progress, duration
from tests.support.cli import cli_env, run_cli
from tests.support.harness import REPO
from tests.support.polling import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_pipe_gets_a_plain_line_every_few_seconds_with_rate_and_time_left() -> None:
    clock, out = Clock(), io.StringIO()
    progress = Progress("jobs", every_s=5, stream=out, clock=clock)
    for remaining in range(100, 0, -10):  # 10 jobs a second
        progress.update(remaining)
        clock.now += 1
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines  # 10 s of polling, one line at 5 s (none before the pace is known)
    assert lines[0] == "50 jobs left, 10.0/s, about 5 s left", lines


def test_a_terminal_gets_one_line_rewritten_in_place_and_cleared() -> None:
    clock, out = Clock(), Terminal()
    progress = Progress("jobs", doing="draining", stream=out, clock=clock)
    progress.update(40, total=40)
    clock.now += 1
    progress.update(20, total=40)
    progress.clear()
    text = out.getvalue()
    assert "\n" not in text and text.count("\r\033[K") == 3, repr(text)
    assert "draining: 40 jobs left of 40, measuring the rate" in text
    assert "draining: 20 jobs left of 40, 20.0/s, about 1 s left" in text


def test_json_lines_carry_the_same_figures() -> None:
    clock, out = Clock(), Terminal()  # --json: JSON lines even on a terminal
    progress = Progress("memories", doing="re-embedding", as_json=True, every_s=1, stream=out, clock=clock)
    progress.update(300, total=300, force=True)
    clock.now += 2
    progress.update(100, total=300)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["remaining"] == 300 and first["rate_per_s"] is None
    assert second == {
        "progress": "memories",
        "remaining": 100,
        "total": 300,
        "rate_per_s": 100.0,
        "eta_s": 1.0,
        "elapsed_s": 2.0,
        "detail": "",
    }


def test_no_progress_is_said_rather_than_an_endless_estimate() -> None:
    clock, out = Clock(), io.StringIO()
    progress = Progress("jobs", every_s=5, stream=out, clock=clock)
    for _ in range(7):
        progress.update(12)
        clock.now += 1
    assert out.getvalue().splitlines() == ["12 jobs left, no progress in the last 5 s"]


def test_durations_read_as_people_say_them() -> None:
    assert [duration(s) for s in (4.4, 65, 7300)] == ["4 s", "1 min 5 s", "2 h 1 min"]


#: A stand-in for ``memjobs up``: it holds the data directory's lock, writes the
#: state file, and on SIGTERM records its stop as the real one does.
FAKE_UP = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from memjobs_worker.embedded.stack import (StackInfo, StackLock, remove_stack, write_stack,
                                                write_stop_record)
    data_dir, problems = Path(sys.argv[1]), sys.argv[2:]
    lock = StackLock(data_dir)
    assert lock.acquire()
    write_stack(data_dir, StackInfo(os.getpid(), "redis://127.0.0.1:1/0",
                                    "postgresql://x@127.0.0.1:1/x", time.time()))
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    print("ready", flush=True)
    while not stop:
        time.sleep(0.05)
    remove_stack(data_dir)
    write_stop_record(data_dir, os.getpid(), problems)
    lock.release()
""")


def fake_up(data_dir: Path, *problems: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", FAKE_UP, str(data_dir), *problems],
        cwd=REPO,
        env=cli_env(data_dir),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_down_says_a_forced_stop_and_exits_1(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    proc = fake_up(data_dir, "forced: the workers did not finish their jobs within 60 s and were killed")
    try:
        result = run_cli(cli_env(data_dir), "down", "--timeout", "60")
        assert result.code == exits.FAILED, str(result)
        assert "not cleanly" in result.stderr and "forced" in result.stderr, str(result)
    finally:
        proc.kill()
        proc.wait()


def test_down_of_a_clean_stop_exits_0(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    proc = fake_up(data_dir)
    try:
        result = run_cli(cli_env(data_dir), "down", "--timeout", "60")
        assert result.code == exits.OK, str(result)
        assert "stopped" in result.stdout and "not cleanly" not in result.stderr
        wait_for(lambda: proc.poll() is not None, 30, "the fake up's exit")
    finally:
        proc.kill()
        proc.wait()
