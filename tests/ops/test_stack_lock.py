"""The data directory's lock and state file, without servers: one holder at a
time, state read only while a holder lives, older files made private."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from memjobs_worker.embedded.stack import (
    StackInfo,
    StackLock,
    lock_is_held,
    read_stack,
    tighten,
    write_stack,
)
from tests.support.harness import REPO

HOLD = """
import sys, time
from pathlib import Path
from memjobs_worker.embedded.stack import StackLock
lock = StackLock(Path(sys.argv[1]))
assert lock.acquire()
print("held", flush=True)
sys.stdin.read()
"""


def test_one_holder_at_a_time_and_the_kernel_releases_a_dead_holders_lock(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(data_dir)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        write_stack(data_dir, StackInfo(holder.pid, "redis://127.0.0.1:1/0", "postgresql://x", time.time()))
        assert lock_is_held(data_dir)
        assert StackLock(data_dir).acquire() is False
        info = read_stack(data_dir)
        assert info is not None and info.pid == holder.pid
    finally:
        holder.kill()  # no clean-up code runs: the kernel drops the lock
        holder.wait()
    assert not lock_is_held(data_dir)
    assert read_stack(data_dir) is None, "a state file without a live holder is a leftover"
    mine = StackLock(data_dir)
    assert mine.acquire()
    mine.release()


def test_the_state_file_and_lock_are_owner_only(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    lock = StackLock(data_dir)
    assert lock.acquire()
    write_stack(data_dir, StackInfo(1, "redis://r", "postgresql://p", 0.0, metrics_url=None))
    for path in (data_dir / "run" / "stack.json", data_dir / "run" / "stack.lock"):
        assert path.stat().st_mode & 0o777 == 0o600, path
    assert (data_dir / "run").stat().st_mode & 0o777 == 0o700
    lock.release()


def test_tighten_makes_an_older_data_directory_private(tmp_path: Path) -> None:
    (tmp_path / "mem0").mkdir()
    (tmp_path / "mem0").chmod(0o755)  # as an older memjobs left it, whatever this process's umask
    (tmp_path / "mem0" / "history.db").write_text("memory text")
    (tmp_path / "mem0" / "history.db").chmod(0o644)
    (tmp_path / "postgres").mkdir(mode=0o700)
    (tmp_path / "postgres" / "left.alone").write_text("")
    (tmp_path / "postgres" / "left.alone").chmod(0o640)
    assert tighten(tmp_path) == 2
    assert (tmp_path / "mem0").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "mem0" / "history.db").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "postgres" / "left.alone").stat().st_mode & 0o777 == 0o640
