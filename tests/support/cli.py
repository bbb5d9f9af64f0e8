"""Running the ``memjobs`` command line the way a user runs it (one subprocess per
command, settings from the environment), and the embedded stacks (``memjobs
up``) the CLI, stack and HTTP tests start: their environment, their scratch
directories, and stopping whatever they left running."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from memjobs_worker.cli import exits
from tests.support.harness import REPO
from tests.support.openai_server import echo_facts_handler, is_consolidation, patch_reply

_FOREIGN_ENV = ("MEMJOBS_", "QWEN_", "DASHSCOPE", "NOVA_AUDIO_")
CLI_TIMEOUT_S = 120.0
STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0

SOURCE_KEYS = {"source_id", "state", "created_at", "learned_at", "reason"}
MEMORY_KEYS = {"memory_id", "text", "source_ids"}
HIT_KEYS = {"memory_id", "text", "score", "source_ids"}

PEANUT = "我对花生过敏"
TEA = "I drink green tea every morning"
SECRET = "my password is hunter2!"


# --- running the CLI ---------------------------------------------------------------


def cli_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The test process's environment without any memjobs setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV)}
    env["PYTHONPATH"] = str(REPO)
    env["MEMJOBS_DATA_DIR"] = str(data_dir)
    env["MEM0_TELEMETRY"] = "False"
    env["MEMJOBS_KNOWLEDGE"] = "on"  # opt-in (off by default); tests of the default set it off
    env["MEMJOBS_LOCAL_EMBEDDER"] = "hashing"  # the test double (tests/conftest.py); "e5" where it matters
    env.update(extra)
    return env


@dataclass
class Result:
    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """stdout parsed as exactly one JSON document."""
        try:
            return json.loads(self.stdout)
        except ValueError:
            pytest.fail(
                f"memjobs {' '.join(self.args)}: stdout is not one JSON document: "
                f"{self.stdout!r} (stderr: {self.stderr[-2000:]!r})"
            )

    def __str__(self) -> str:
        return (
            f"memjobs {' '.join(self.args)} -> {self.code}\n"
            f"stdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-3000:]}"
        )


def run_cli(env: dict[str, str], *args: str, timeout: float = CLI_TIMEOUT_S, stdin: str | None = None) -> Result:
    """``memjobs *args`` in ``env``, reading ``stdin`` (nothing if None)."""
    proc = subprocess.run(
        [sys.executable, "-m", "memjobs_worker.cli.main", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL if stdin is None else None,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Result(args, proc.returncode, proc.stdout, proc.stderr)


def run_cli_into_closed_pipe(env: dict[str, str], *args: str) -> Result:
    """``memjobs *args`` writing to a pipe whose reader is gone before the first line
    (``| head -1`` once it has read its line); its stdout is always empty."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "memjobs_worker.cli.main", *args],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    return Result(args, proc.returncode, "", proc.stderr)


def ok(result: Result) -> Result:
    assert result.code == exits.OK, str(result)
    return result


# --- processes -------------------------------------------------------------------


def pids_mentioning(needle: str) -> list[int]:
    """Processes whose command line names ``needle`` (a test's own data directory:
    the embedded redis-server ``--dir`` and postgres ``-D``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _recorded_pids(path: Path) -> list[int]:
    """Under ``path`` or a data directory directly inside it: the workers' group
    leader named in the state file (SIGKILLed here) and the Redis named in its pid
    file (redis-server rewrites its command line, so it does not mention the directory)."""
    candidates = [path, *path.iterdir()] if path.is_dir() else [path]
    return [pid for candidate in candidates if candidate.is_dir() for pid in _recorded_in(candidate)]


def _recorded_in(data_dir: Path) -> list[int]:
    pids = []
    try:
        worker = json.loads((data_dir / "run" / "stack.json").read_text()).get("worker_pid")
        if worker and b"memjobs_worker" in Path(f"/proc/{worker}/cmdline").read_bytes():
            os.killpg(worker, signal.SIGKILL)
            pids.append(worker)
    except (OSError, ValueError):
        pass
    try:
        redis_pid = int((data_dir / "redis" / "redis.pid").read_text())
        if Path(f"/proc/{redis_pid}/comm").read_text().startswith("redis-server"):
            pids.append(redis_pid)
    except (OSError, ValueError):
        pass
    return pids


def stop_leftovers(data_dir: Path, timeout_s: float = 20.0) -> list[int]:
    """SIGTERM, then SIGKILL, every server still running on ``data_dir``; returns their pids."""
    pids = pids_mentioning(str(data_dir)) + [p for p in _recorded_pids(data_dir) if alive(p)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def stop_group(proc: subprocess.Popen[Any], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM the process group of ``proc`` (a session leader), SIGKILL after a timeout."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout_s)
            if sig == signal.SIGTERM:
                # The main process is gone; make sure nothing of its group survives.
                os.killpg(proc.pid, signal.SIGKILL)
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return
    proc.wait(10)


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class Up:
    """One ``memjobs up --processes 1 --threads 2`` in its own session."""

    def __init__(self, data_dir: Path, env: dict[str, str], output: Path) -> None:
        self.data_dir = data_dir
        self.env = env
        self.output = output
        self._out: IO[bytes] = open(output, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memjobs_worker.cli.main", "up", "--processes", "1", "--threads", "2"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def stack_file(self) -> Path:
        return self.data_dir / "run" / "stack.json"

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Until the state file exists and ``status`` counts a live worker.

        Polling with a deadline: ``memjobs up`` is an external process whose
        readiness has no other signal.
        """
        deadline = time.monotonic() + timeout_s
        last: Result | None = None
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"memjobs up exited with {self.proc.returncode}:\n{self.text()}")
            if self.stack_file.exists():
                last = run_cli(self.env, "status", "--json")
                if last.code == exits.OK and last.json()["workers"] >= 1:
                    return
            if time.monotonic() > deadline:
                pytest.fail(
                    f"memjobs up not ready after {timeout_s:.0f} s; last status: {last}\noutput:\n{self.text()}"
                )
            time.sleep(0.2)

    def close(self) -> None:
        if self.proc.poll() is None or group_alive(self.proc.pid):
            stop_group(self.proc)
        self._out.close()


@dataclass
class EmbeddedStack:
    """The module's ``memjobs up``, its data directory, and what was said to it."""

    data_dir: Path
    env: dict[str, str]
    started: list[Up]
    texts: set[str]
    owners: set[str]

    @property
    def up(self) -> Up:
        return self.started[-1]

    def start(self, output_name: str) -> Up:
        up = Up(self.data_dir, self.env, self.data_dir.parent / output_name)
        self.started.append(up)
        up.wait_ready()
        return up

    def cli(self, *args: str) -> Result:
        """Run a command against this stack, remembering every text and owner it names."""
        for flag, seen in (("--text", self.texts), ("--owner", self.owners)):
            if flag in args:
                seen.add(args[args.index(flag) + 1])
        return run_cli(self.env, *args)

    def json(self, *args: str) -> Any:
        return ok(self.cli(*args, "--json")).json()

    def remember(self, owner: str, text: str) -> str:
        doc = self.json("remember", "--owner", owner, "--text", text)
        assert doc["status"] == "queued", doc
        return str(doc["source_id"])

    def drain(self, timeout_s: float = 60) -> None:
        ok(self.cli("drain", "--timeout", str(timeout_s)))

    def states(self, owner: str) -> dict[str, str]:
        return {s["source_id"]: s["state"] for s in self.json("sources", "--owner", owner)}


@contextmanager
def running_stack(data_dir: Path, env: dict[str, str], output_name: str) -> Iterator[EmbeddedStack]:
    """A ``memjobs up`` on ``data_dir``, ready, its output in ``output_name`` beside it;
    on leaving, every ``memjobs up`` the stack started is stopped."""
    stack = EmbeddedStack(data_dir, env, [], set(), set())
    try:
        stack.start(output_name)
        yield stack
    finally:
        for up in stack.started:
            up.close()


@contextmanager
def scratch_dir(label: str) -> Iterator[Path]:
    """A directory for an embedded stack, outside pytest's ``/tmp/pytest-of-<user>``.

    Running as root, the embedded PostgreSQL runs as a system user that must be
    able to traverse every parent of its data directory; every pytest session
    that starts (other suites run concurrently on this machine) resets
    ``/tmp/pytest-of-<user>`` to mode 0700, which would lock that user out.
    """
    path = Path(tempfile.mkdtemp(prefix=f"memjobs-cli-{label}-"))
    try:
        yield path
    finally:
        stop_leftovers(path)
        shutil.rmtree(path, ignore_errors=True)


def new_owner(label: str) -> str:
    return f"cli-{label}-{uuid.uuid4().hex[:12]}"


def demo_model_reply(request: dict[str, Any]) -> str:
    """Consolidation gets a patch grounded in the demo's words; mem0 gets echoed facts."""
    if is_consolidation(request):
        return patch_reply("- 对花生过敏", "我对花生过敏")
    return echo_facts_handler(request)


def assert_owner_only(data_dir: Path) -> None:
    """Directories 0700 (root only: o+x on the way to PostgreSQL's cluster, which
    runs as another user), files without group or other bits."""
    traversable = {data_dir} if os.geteuid() == 0 else set()
    loose = []
    for path in [data_dir, *data_dir.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode & 0o777
        if path.is_dir():
            allowed = 0o701 if path in traversable else 0o700
        else:  # a socket (PostgreSQL's) needs its owner's x bit to be connected to
            allowed = 0o700 if stat.S_ISSOCK(path.stat().st_mode) else 0o600
        if mode & ~allowed:
            loose.append(f"{oct(mode)} {path}")
    assert loose == [], "\n".join(loose)
