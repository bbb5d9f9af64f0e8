"""What a benchmark script does first: nothing of the caller's memjobs
configuration leaks into it (the shell's ``MEMJOBS_*`` and model variables
would point it at another stack or a real model), and mem0 sends no telemetry;
where it runs: a :class:`Scratch` directory with its own servers; and how long
its threads took together (:func:`seconds_to_run`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Self

from memjobs_worker.embedded import EmbeddedPostgres, EmbeddedRedis
from tests.support.harness import REPO
from tests.support.openai_server import FakeOpenAI

#: The prefixes of the variables memjobs' settings (and their aliases) read.
PREFIXES = ("MEMJOBS_", "QWEN_AUDIO_", "DASHSCOPE_", "NOVA_AUDIO_")


def seconds_to_run(threads: list[threading.Thread]) -> float:
    """Starts ``threads`` and waits for them all: the wall-clock seconds that took."""
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def keep_or_remove(directory: Path, keep: bool, holds: str = "") -> None:
    """Remove a run's ``directory``, or with ``keep`` leave it and print its path
    (and what it ``holds``, for reading after a run that went wrong)."""
    if keep:
        print(f"kept {directory} ({holds})" if holds else directory)
    else:
        shutil.rmtree(directory, ignore_errors=True)


def isolate() -> None:
    """Drop every memjobs variable from this process's environment; telemetry off."""
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    for name in list(os.environ):
        if name.startswith(PREFIXES):
            del os.environ[name]


class Scratch:
    """A benchmark run's scratch directory and what it starts there (embedded
    Redis and PostgreSQL, the stand-in model, worker processes): on leaving the
    ``with`` block each is stopped, the last started first, and the directory
    removed; with ``KEEP=1`` in the environment the directory stays and its path
    is printed, for reading the logs of a run that went wrong."""

    def __init__(self, label: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"memjobs-bench-{label}-"))
        self.dir.chmod(0o755)  # PostgreSQL's directory below it is reached as another user when root
        self._stack = ExitStack()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._stack.close()
        finally:
            keep_or_remove(self.dir, bool(os.environ.get("KEEP")))

    def redis(self, name: str = "redis", **options: Any) -> EmbeddedRedis:
        """An embedded Redis in ``name`` below the directory, started."""
        server = EmbeddedRedis(self.dir / name, **options)
        self._stack.callback(server.stop)
        server.start()
        return server

    def postgres(self, name: str = "pg") -> EmbeddedPostgres:
        """An embedded PostgreSQL (with pgvector) in ``name`` below the directory, started."""
        server = EmbeddedPostgres(self.dir / name)
        self._stack.callback(server.stop)
        server.start()
        return server

    def model(self, embedding_dims: int) -> FakeOpenAI:
        """The stand-in model server, started."""
        fake = FakeOpenAI(embedding_dims=embedding_dims).start()
        self._stack.callback(fake.stop)
        return fake

    def env(self, redis_url: str, database_url: str, **extra: str) -> dict[str, str]:
        """The environment of a memjobs process of this run: none of the caller's
        memjobs variables (:func:`isolate`'s prefixes); this run's servers and data
        directory, the hashed embedder, metrics and knowledge off; then ``extra``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIXES)}
        env.update(
            PYTHONPATH=str(REPO),
            MEMJOBS_REDIS_URL=redis_url,
            MEMJOBS_DATABASE_URL=database_url,
            MEMJOBS_DATA_DIR=str(self.dir / "data"),
            MEMJOBS_LOCAL_EMBEDDER="hashing",
            MEMJOBS_METRICS="off",
            MEMJOBS_KNOWLEDGE="off",
            MEM0_TELEMETRY="False",
        )
        env.update(extra)
        return env

    def memjobs(self, env: dict[str, str], *command: str) -> subprocess.Popen[bytes]:
        """``memjobs COMMAND…`` in its own session, its output in ``workers.log``
        of the directory, stopped at the end (:meth:`process`)."""
        with (self.dir / "workers.log").open("ab") as log:  # the child keeps its own copy
            proc = subprocess.Popen(
                [sys.executable, "-m", "memjobs_worker.cli.main", *command],
                env=env,
                cwd=REPO,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        return self.process(proc)

    def process(self, proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        """``proc`` (a session leader) stopped at the end: SIGTERM, then its whole group killed after 60 s."""
        self._stack.callback(_stop, proc)
        return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
