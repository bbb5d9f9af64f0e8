"""What a dead ``memjobs up`` left running: found (``status``, ``check`` and
``down`` report it) and stopped (by ``down``, and by the next ``up``).

The processes are the ones ``up`` starts: the workers' process group (named
in the state file), the embedded Redis (its pid file) and the embedded
PostgreSQL (``postmaster.pid`` in its cluster). Each is recognised by its
command name too, so a pid the kernel has since given to another program is
never signalled. Only a process that does not hold the data directory's lock
may stop them; reading them is harmless, but while an ``up`` runs they are
its own, not leftovers (callers check :func:`~memjobs_worker.embedded.stack.lock_is_held`).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from memjobs_worker.embedded.process import group_members, pid_alive, process_cmdline, process_name
from memjobs_worker.embedded.redis import leftover_redis_pid
from memjobs_worker.embedded.stack import read_state_file, remove_stack


@dataclass(frozen=True)
class Leftover:
    """One thing left running: ``what`` it is, its ``pid``, and whether that
    pid leads a process ``group`` (the workers) that is stopped as a whole."""

    what: str
    pid: int
    group: bool = False

    def __str__(self) -> str:
        return f"{self.what} (pid {self.pid})"

    def running(self) -> bool:
        return bool(group_members(self.pid)) if self.group else pid_alive(self.pid)


def postmaster_pid(cluster: Path) -> int | None:
    """The pid of a PostgreSQL still running on ``cluster`` (its
    ``postmaster.pid`` names a live process called postgres), or None."""
    try:
        pid = int((cluster / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, IndexError, ValueError):
        return None
    return pid if (process_name(pid) or "").startswith("postgres") and pid_alive(pid) else None


def find_leftovers(data_dir: Path, *, postgres: bool = True) -> list[Leftover]:
    """The workers, Redis and (with ``postgres``) PostgreSQL of ``data_dir``
    still running; meaningful only when no ``up`` holds the data directory."""
    found: list[Leftover] = []
    old = read_state_file(data_dir)
    if (
        old is not None
        and old.worker_pid
        and any("memjobs_worker" in process_cmdline(pid) for pid in group_members(old.worker_pid))
    ):
        found.append(Leftover("the workers", old.worker_pid, group=True))
    redis_pid = leftover_redis_pid(data_dir / "redis")
    if redis_pid is not None and pid_alive(redis_pid):
        found.append(Leftover("Redis", redis_pid))
    if postgres:
        pg_pid = postmaster_pid(data_dir / "postgres")
        if pg_pid is not None:
            found.append(Leftover("PostgreSQL", pg_pid))
    return found


def _signal(leftover: Leftover, sig: signal.Signals) -> None:
    try:
        (os.killpg if leftover.group else os.kill)(leftover.pid, sig)
    except ProcessLookupError:
        pass


def terminate(leftover: Leftover, *, timeout_s: float) -> bool:
    """Stop one leftover: SIGTERM (PostgreSQL: SIGINT, its fast shutdown),
    SIGKILL after ``timeout_s``. Returns whether it stopped before the SIGKILL."""
    _signal(leftover, signal.SIGINT if leftover.what == "PostgreSQL" else signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while leftover.running() and time.monotonic() < deadline:
        time.sleep(0.1)
    if not leftover.running():
        return True
    _signal(leftover, signal.SIGKILL)
    return False


def stop_leftovers(data_dir: Path, *, timeout_s: float = 60.0, postgres: bool = False) -> list[str]:
    """Stop what a dead ``up`` on ``data_dir`` left (its PostgreSQL only with
    ``postgres``: the next ``up`` adopts it instead); remove its state file.
    Call only while holding the data directory's lock. Returns one line per
    thing stopped (empty: nothing was left)."""
    done: list[str] = []
    # The workers first: they use Redis and PostgreSQL until they stop.
    for leftover in find_leftovers(data_dir, postgres=postgres):
        clean = terminate(leftover, timeout_s=timeout_s)
        done.append(
            f"stopped {leftover} left by a previous memjobs up" + ("" if clean else f" (killed after {timeout_s:g} s)")
        )
    if read_state_file(data_dir) is not None:
        remove_stack(data_dir)
    return done
