"""Test harness: memjobs wired to the test session's Redis and PostgreSQL, with
an in-process Dramatiq worker or real worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dramatiq

from memjobs_worker.actors import declare_actors
from memjobs_worker.broker import build_broker
from memjobs_worker.endpoints import Endpoints
from memjobs_worker.ops import status as ops
from memjobs_worker.ops.server import prepare_metrics_dir
from memjobs_worker.pools import worker_command
from memjobs_worker.runtime import Runtime, producer_client
from memjobs_worker.settings import Settings

REPO = Path(__file__).resolve().parent.parent.parent


class Harness:
    """Broker, actors, runtime and (optionally) an in-process worker for one test."""

    def __init__(self, settings: Settings) -> None:
        assert settings.redis.url and settings.database.url
        self.settings = settings
        self.endpoints = Endpoints(settings.redis.url, settings.database.url)
        self.broker = build_broker(
            settings.redis.url,
            settings.redis,
            settings.workers,
            serve_metrics=settings.metrics.endpoint,
            knowledge_on=settings.knowledge.enabled,
        )
        self.client = producer_client(
            settings.redis, settings.memory, settings.sessions, settings.knowledge, broker=self.broker
        )
        self.runtime = Runtime(settings, self.endpoints, self.client)
        self.actors = declare_actors(self.broker, self.runtime)
        self.worker: dramatiq.Worker | None = None

    @property
    def store(self) -> Any:
        return self.runtime.store

    @property
    def pipeline(self) -> Any:
        return self.runtime.pipeline

    def start_worker(self, threads: int = 2) -> None:
        self.worker = dramatiq.Worker(self.broker, worker_threads=threads, worker_timeout=50)
        self.worker.start()

    def stop_worker(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker = None

    def drain(self, timeout_s: float = 60) -> None:
        assert ops.drain(self.runtime.redis, self.runtime.store, timeout_s, poll_s=0.05), (
            f"not drained: {ops.status(self.runtime.redis, self.runtime.store)}"
        )

    def queues(self) -> dict[str, dict[str, int]]:
        return ops.queue_stats(self.runtime.redis)

    def close(self) -> None:
        self.stop_worker()
        self.runtime.close()
        self.broker.close()


#: The types of the ``make_settings``/``model_settings`` and ``harness_factory`` fixtures (tests/conftest.py).
MakeSettings = Callable[..., Settings]
HarnessFactory = Callable[[Settings], Harness]


def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    """Environment for a real worker process with the same settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMJOBS_", "QWEN_", "DASHSCOPE"))}
    for entry in settings.entries():
        # Only what the test set: a default written out would count as "configured"
        # (an explicit QWEN_AUDIO_MEMORY_BASE_URL turns the model on).
        if entry.value is None or not entry.from_env:
            continue
        value = entry.value.get_secret_value() if hasattr(entry.value, "get_secret_value") else entry.value
        env[entry.env] = str(value)
    env.update(extra)
    env["PYTHONPATH"] = str(REPO)
    return env


def launch(command: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """``command`` in its own process group (see :func:`kill_group`) from the
    repository, its output appended to ``log_path``."""
    with log_path.open("ab") as out:
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO
        )


def spawn_workers(
    settings: Settings, log_path: Path, *, processes: int = 1, threads: int = 2, prefix: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """Real ``dramatiq memjobs_worker.app`` processes in their own process group
    (``prefix``: a command that runs them, e.g. with fewer capabilities)."""
    env = worker_env(settings)
    prepare_metrics_dir(settings.metrics_dir, env)  # as `memjobs worker` does
    return launch([*prefix, *worker_command(processes, threads)], env, log_path)


def kill_group(proc: subprocess.Popen[Any], sig: int = signal.SIGKILL) -> None:
    """SIGKILL the worker's whole process group (the main process and its children);
    any other signal goes to the main process only, which forwards it once (a
    second SIGTERM makes Dramatiq's children exit hard)."""
    try:
        if sig == signal.SIGKILL:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except ProcessLookupError:
        pass
    proc.wait(60)
