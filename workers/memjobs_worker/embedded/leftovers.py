"""What a dead ``memjobs up`` left running, found and stopped by the next one.

Called only while holding the data directory's lock, so nothing found here can
belong to a live ``up``. The state file names the workers' process group and
the embedded Redis; Redis's own pid file names it too (in case ``up`` died
before writing the state file). A PostgreSQL left running is adopted by
:class:`~memjobs_worker.embedded.postgres.EmbeddedPostgres` (it owns its data
directory through ``postmaster.pid``), so it is not stopped here.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from memjobs_worker.embedded.process import pid_alive
from memjobs_worker.embedded.redis import leftover_redis_pid
from memjobs_worker.embedded.stack import read_state_file, remove_stack


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _terminate(pid: int, *, group: bool, timeout_s: float) -> None:
    """SIGTERM (the whole group when ``group``), SIGKILL after ``timeout_s``."""
    send = os.killpg if group else os.kill
    try:
        send(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(pid):
        try:
            send(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_leftovers(data_dir: Path, *, timeout_s: float = 60.0) -> list[str]:
    """Stop the workers and the Redis of a dead ``up`` on ``data_dir``; remove
    its state file. Returns one line per thing stopped (empty: nothing was left)."""
    done: list[str] = []
    old = read_state_file(data_dir)
    if old is not None and old.worker_pid and pid_alive(old.worker_pid) \
            and "memjobs_worker" in _cmdline(old.worker_pid):
        _terminate(old.worker_pid, group=True, timeout_s=timeout_s)
        done.append(f"stopped the workers (pid {old.worker_pid}) left by a previous memjobs up")
    redis_pid = leftover_redis_pid(data_dir / "redis")
    if redis_pid is not None and pid_alive(redis_pid):
        _terminate(redis_pid, group=False, timeout_s=timeout_s)
        done.append(f"stopped the Redis (pid {redis_pid}) left by a previous memjobs up")
    if old is not None:
        remove_stack(data_dir)
    return done
