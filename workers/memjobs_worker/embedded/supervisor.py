"""``memjobs up``: the embedded stack in the foreground.

Start order: Redis (if no URL is configured), PostgreSQL (likewise), the
migrations, the state file, the worker processes, the sweeper.
Stop order (Ctrl-C or SIGTERM): the sweeper; the workers (Dramatiq stops
consuming, finishes what is in flight and returns the rest to Redis); the
state file; PostgreSQL; Redis (which flushes its append-only file). Nothing
acknowledged is lost, and nothing unacknowledged is dropped.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

from memjobs_client.errors import MemjobsError
from memjobs_worker.db import create_db_engine, migrate
from memjobs_worker.embedded import EmbeddedPostgres, EmbeddedRedis, StackInfo, remove_stack, write_stack
from memjobs_worker.embedded.stack import read_stack
from memjobs_worker.endpoints import Endpoints
from memjobs_worker.memory.pipeline import sweep
from memjobs_worker.observability.server import prepare_metrics_dir
from memjobs_worker.runtime import Runtime, producer_client
from memjobs_worker.settings import Settings

log = logging.getLogger(__name__)


class Stack:
    """The servers, workers and sweeper of one ``memjobs up`` (or ``demo``)."""

    def __init__(self, settings: Settings, *, processes: int, threads: int) -> None:
        self.settings = settings
        self.processes = processes
        self.threads = threads
        self.redis: EmbeddedRedis | None = None
        self.postgres: EmbeddedPostgres | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.endpoints: Endpoints | None = None
        self.stopping = threading.Event()
        self._sweeper: threading.Thread | None = None
        self._runtime: Runtime | None = None

    def start(self) -> Endpoints:
        """Start what is not configured elsewhere; return where everything is."""
        s = self.settings
        running = read_stack(s.data_dir)
        if running is not None:
            raise MemjobsError(
                f"a memjobs stack is already running in {s.data_dir} (pid {running.pid})"
            )
        redis_url = s.redis_url
        if redis_url is None:
            self.redis = EmbeddedRedis(s.data_dir / "redis", appendfsync=s.redis_appendfsync)
            redis_url = self.redis.start()
        database_url = s.database_url
        if database_url is None:
            self.postgres = EmbeddedPostgres(s.data_dir / "postgres")
            database_url = self.postgres.start()
        engine = create_db_engine(database_url, pool_size=1)
        try:
            migrate(engine)
        finally:
            engine.dispose()
        self.endpoints = Endpoints(redis_url, database_url)
        write_stack(s.data_dir, StackInfo(os.getpid(), redis_url, database_url, time.time()))
        self._start_worker()
        return self.endpoints

    def _start_worker(self) -> None:
        assert self.endpoints is not None
        env = dict(os.environ)
        env["MEMJOBS_REDIS_URL"] = self.endpoints.redis_url
        env["MEMJOBS_DATABASE_URL"] = self.endpoints.database_url
        env["MEMJOBS_DATA_DIR"] = str(self.settings.data_dir)
        prepare_metrics_dir(self.settings, env)
        log_path = self.settings.data_dir / "logs" / "worker.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            self.worker = subprocess.Popen(
                worker_command(self.processes, self.threads), env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            )

    def start_sweeper(self) -> None:
        """Run the pending sweeper every ``sweep_interval_ms`` until stopped."""
        assert self.endpoints is not None
        client = producer_client(self.settings, redis_url=self.endpoints.redis_url)
        self._runtime = Runtime(self.settings, self.endpoints, client)

        def loop() -> None:
            interval_s = self.settings.sweep_interval_ms / 1000
            while not self.stopping.wait(interval_s):
                try:
                    sweep_once(self._runtime, self.settings)  # type: ignore[arg-type]
                except MemjobsError as exc:
                    log.warning("sweep failed", extra={"reason": exc.reason})

        self._sweeper = threading.Thread(target=loop, name="sweeper", daemon=True)
        self._sweeper.start()

    def supervise(self) -> None:
        """Block until SIGINT/SIGTERM; restart the worker if it dies."""
        received: list[int] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            # Only record it: a handler that set an Event could deadlock on the
            # lock the interrupted main thread holds inside Event.wait().
            signal.signal(sig, lambda signum, _frame: received.append(signum))
        while not received:
            time.sleep(0.2)
            if self.worker is not None and self.worker.poll() is not None and not received:
                log.warning("worker exited; restarting", extra={"code": self.worker.returncode})
                self._start_worker()

    def stop(self) -> list[str]:
        """Stop everything in order; returns what could not be stopped (empty: clean)."""
        problems: list[str] = []
        self.stopping.set()
        if self._sweeper is not None:
            self._sweeper.join(timeout=30)
            if self._sweeper.is_alive():
                problems.append("the sweeper did not finish its pass within 30 s")
        if self.worker is not None and self.worker.poll() is None:
            self.worker.send_signal(signal.SIGTERM)
            try:
                self.worker.wait(60)
            except subprocess.TimeoutExpired:
                problems.append("the workers did not stop within 60 s and were killed")
                self.worker.kill()
                self.worker.wait()
        if self._runtime is not None:
            self._runtime.close()
            self._runtime.client.close()
        remove_stack(self.settings.data_dir)
        for name, server in (("PostgreSQL", self.postgres), ("Redis", self.redis)):
            if server is None:
                continue
            try:
                server.stop()
            except (MemjobsError, OSError) as exc:
                problems.append(f"{name} did not stop: {exc}")
        return problems


def worker_command(processes: int, threads: int) -> list[str]:
    """The Dramatiq command line of memjobs' workers."""
    return [sys.executable, "-m", "dramatiq", "memjobs_worker.app",
            "--processes", str(processes), "--threads", str(threads)]


def sweep_once(runtime: Runtime, settings: Settings) -> dict[str, int]:
    """One maintenance pass: re-enqueue owners whose sources are pending too
    long, then apply retention (digests, terminal task records, session runs)."""
    now = datetime.now(UTC)
    owners = sweep(runtime.store, runtime.scheduler, now, settings.sweep_pending_after_ms)
    expired = runtime.sessions.apply_retention(now)
    return {"owners_requeued": owners, "digests_deleted": expired.digests_deleted,
            "tasks_deleted": expired.tasks_deleted, "session_runs_deleted": expired.runs_deleted}
