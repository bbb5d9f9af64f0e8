"""One stack per data directory: the lock ``memjobs up`` holds for its lifetime,
and the state file through which other commands find what it started.

The lock is an exclusive ``flock`` on ``run/stack.lock``, held open by the
``up`` process: the kernel releases it when that process exits, however it
exits, so "is a stack running here?" never depends on guessing from a pid
(which the kernel may have given to another process since). The state file
``run/stack.json`` is written and removed only by the lock's holder.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import IO, Any

#: Owner-only permissions for everything under the data directory.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


@dataclass(frozen=True)
class StackInfo:
    """Where the running embedded stack listens, and what it runs.

    ``worker_pid`` leads the workers' process group; ``redis_pid`` is the
    embedded Redis (None when Redis is configured elsewhere): a later ``up``
    uses them to stop what a crashed ``up`` left behind.
    """

    pid: int
    redis_url: str
    database_url: str
    started_at: float
    metrics_url: str | None = None
    worker_pid: int | None = None
    redis_pid: int | None = None
    #: The HTTP API's URL (``memjobs up`` serves it beside the workers), once it listens.
    api_url: str | None = None
    #: How often ``up`` restarted its embedded PostgreSQL after it died, and when
    #: the last restart ended (epoch seconds).
    postgres_restarts: int = 0
    postgres_restarted_at: float | None = None
    #: How often ``up`` restarted its embedded Redis after it died.
    redis_restarts: int = 0
    #: The stack's effective switches, which the commands run against it follow
    #: (:func:`memjobs_worker.endpoints.stack_settings`): never a secret's value.
    settings: dict[str, Any] | None = None


def stack_file(data_dir: Path) -> Path:
    return data_dir / "run" / "stack.json"


def stop_file(data_dir: Path) -> Path:
    """How the last ``up`` of this data directory stopped (``memjobs down`` reads it)."""
    return data_dir / "run" / "last-stop.json"


def lock_file(data_dir: Path) -> Path:
    return data_dir / "run" / "stack.lock"


def private_dir(path: Path) -> Path:
    """Create ``path`` (and its parents) owner-only; tighten it if it exists.

    Run as root, an o+x bit is kept: the embedded PostgreSQL runs as its own
    system user, which must traverse the data directory to reach its cluster.
    """
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    keep = path.stat().st_mode & 0o001 if os.geteuid() == 0 else 0
    if path.stat().st_mode & 0o777 & ~(PRIVATE_DIR_MODE | keep):
        path.chmod(PRIVATE_DIR_MODE | keep)
    return path


def tighten(data_dir: Path, *, skip: tuple[str, ...] = ("postgres",)) -> int:
    """Remove group and other permissions from what an older memjobs left under
    ``data_dir`` (PostgreSQL's cluster excepted: the server keeps it private
    itself). Returns how many paths were changed."""
    changed = 0
    for top in data_dir.iterdir() if data_dir.exists() else ():
        if top.name in skip:
            continue
        for path in [top, *top.rglob("*")] if top.is_dir() else [top]:
            if path.is_symlink():
                continue
            mode = path.stat().st_mode & 0o777
            if mode & 0o077:
                path.chmod(mode & 0o700)
                changed += 1
    return changed


class StackLock:
    """The exclusive lock of one data directory, held until :meth:`release`."""

    def __init__(self, data_dir: Path) -> None:
        self.path = lock_file(data_dir)
        self._handle: IO[str] | None = None

    def acquire(self) -> bool:
        """Take the lock without waiting; False when another process holds it."""
        private_dir(self.path.parent)
        handle = open(self.path, "a+")  # noqa: SIM115 - held for the stack's lifetime
        os.chmod(self.path, PRIVATE_FILE_MODE)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle
        return True

    @property
    def held(self) -> bool:
        return self._handle is not None

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None


def lock_is_held(data_dir: Path) -> bool:
    """Whether some process holds the data directory's lock right now."""
    try:
        fd = os.open(lock_file(data_dir), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def write_stack(data_dir: Path, info: StackInfo) -> None:
    """Write the state file atomically (rename over the old one), owner-only."""
    path = stack_file(data_dir)
    private_dir(path.parent)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(asdict(info)))
    os.replace(tmp, path)


def read_state_file(data_dir: Path) -> StackInfo | None:
    """The state file's content, whether or not its writer still runs."""
    try:
        raw: dict[str, Any] = json.loads(stack_file(data_dir).read_text())
        known = {f.name for f in fields(StackInfo)}
        return StackInfo(**{k: v for k, v in raw.items() if k in known})
    except (OSError, ValueError, TypeError):
        return None


def read_stack(data_dir: Path) -> StackInfo | None:
    """The running stack, or None when there is no state file or no ``up``
    holds the data directory's lock (the file is a dead ``up``'s leftover)."""
    info = read_state_file(data_dir)
    if info is None or not lock_is_held(data_dir):
        return None
    return info


def record_api_url(data_dir: Path, url: str) -> None:
    """Add the API's URL to the running stack's state file."""
    info = read_stack(data_dir)
    if info is not None:
        write_stack(data_dir, replace(info, api_url=url))


def write_stop_record(data_dir: Path, pid: int, problems: list[str]) -> None:
    """Record how the ``up`` of ``pid`` stopped: cleanly (no problems) or not
    (what had to be forced, what did not stop), for ``memjobs down`` to say."""
    path = stop_file(data_dir)
    private_dir(path.parent)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps({"pid": pid, "problems": problems}))
    os.replace(tmp, path)


def read_stop_record(data_dir: Path, pid: int) -> list[str] | None:
    """The problems the ``up`` of ``pid`` recorded as it stopped (None: no record of it)."""
    try:
        raw = json.loads(stop_file(data_dir).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("pid") != pid:
        return None
    return [str(p) for p in raw.get("problems") or []]


def remove_stack(data_dir: Path) -> None:
    """Remove the state file; only the lock's holder calls this."""
    stack_file(data_dir).unlink(missing_ok=True)
