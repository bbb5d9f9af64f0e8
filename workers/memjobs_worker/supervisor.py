"""``memjobs up``: the embedded stack in the foreground.

Start order: the data directory's lock (one stack per data directory; a
second ``up`` is refused and touches nothing), whatever a dead ``up`` left
running (stopped), Redis (if no URL is configured), PostgreSQL (likewise), the
migrations, the state file, the worker processes, the sweeper.
Stop order (SIGINT, SIGTERM or SIGHUP): the sweeper; the workers (Dramatiq
stops consuming, finishes what is in flight and returns the rest to Redis);
the state file; PostgreSQL; Redis (which flushes its append-only file); the
lock. Nothing acknowledged is lost, and nothing unacknowledged is dropped.

Everything it creates under the data directory is owner-only (umask 077,
inherited by Redis, PostgreSQL and the workers: mem0's history, the logs).
The terminal gets the banner, the notices and the stop; every log record of
``up`` itself (the HTTP API's server, the append-only rewrites, refused
requests) goes to ``logs/worker.log`` with the workers' own.

:func:`stop_stack` is ``memjobs down``: it signals the ``up`` holding the data
directory and waits until every process it started is gone, or, with no
``up`` running, stops what a dead one left.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from memjobs_client.errors import MemjobsError
from memjobs_worker.db.migrate import migrate_apart
from memjobs_worker.embedded import StackInfo, remove_stack, write_stack
from memjobs_worker.embedded.leftovers import Leftover, find_leftovers, stop_leftovers
from memjobs_worker.embedded.logpump import LogPump
from memjobs_worker.embedded.process import pid_alive
from memjobs_worker.embedded.servers import EmbeddedServers
from memjobs_worker.embedded.stack import (
    StackLock,
    lock_file,
    lock_is_held,
    private_dir,
    read_state_file,
    read_stop_record,
    tighten,
    write_stop_record,
)
from memjobs_worker.endpoints import Endpoints, stack_settings
from memjobs_worker.logs import configure_logging
from memjobs_worker.ops.aof import ForgetRewriter
from memjobs_worker.ops.server import claim_metrics_address, prepare_metrics_dir
from memjobs_worker.pools import worker_command
from memjobs_worker.runtime import Runtime, producer_client
from memjobs_worker.settings import Settings

log = logging.getLogger(__name__)

#: The signals that stop ``memjobs up`` in order (SIGHUP: its terminal closed).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StackBusy(MemjobsError):
    """Another ``memjobs up`` holds the data directory."""


class Stack:
    """One ``memjobs up`` (or ``demo``): the data directory's lock, the logs,
    the migration and re-embedding, the state file, the worker processes and
    the sweeper, around the embedded servers it supervises
    (:class:`~memjobs_worker.embedded.servers.EmbeddedServers`)."""

    def __init__(self, settings: Settings, *, processes: int, threads: int) -> None:
        self.settings = settings
        self.processes = processes
        self.threads = threads
        self.servers = EmbeddedServers(say=self._notify, restarted=self._write_state)
        self.worker: subprocess.Popen[bytes] | None = None
        self.endpoints: Endpoints | None = None
        self.metrics_url: str | None = None
        #: The HTTP API's URL once `memjobs up` serves it (kept in the state file).
        self.api_url: str | None = None
        self.notices: list[str] = []  # for the terminal: leftovers stopped, metrics off
        self.stopping = threading.Event()
        self._lock = StackLock(settings.data_dir)
        self._logs: LogPump | None = None
        self._sweeper: threading.Thread | None = None
        self._runtime: Runtime | None = None
        self._started_at = time.time()
        #: Where a running stack says what happened to it (``up``: the terminal).
        self.notify: Callable[[str], None] | None = None

    def start(self) -> Endpoints:
        """Start what is not configured elsewhere; return where everything is.

        Raises:
            StackBusy: another ``up`` holds the data directory (nothing is touched).
        """
        s = self.settings
        os.umask(0o077)
        private_dir(s.data_dir)
        if not self._lock.acquire():
            running = read_state_file(s.data_dir)
            holder = f" (pid {running.pid})" if running else ""
            raise StackBusy(
                f"a memjobs stack is already running in {s.data_dir}{holder}: "
                "use it, or stop it first (Ctrl-C in its terminal)"
            )
        self.notices += stop_leftovers(s.data_dir)
        tighten(s.data_dir)
        logs_dir = private_dir(s.data_dir / "logs")
        self._logs = LogPump(logs_dir / "worker.log", max_bytes=s.logs.max_bytes, backups=s.logs.backups)
        # From here on the terminal is for the banner, the notices and the stop.
        configure_logging(level=s.logs.level, stream=self._logs.stream())
        asked = s
        metrics, self.metrics_url, problem = claim_metrics_address(s.metrics)
        s = self.settings = s.model_copy(update={"metrics": metrics})
        if problem:
            self.notices.append(problem)
        if problem and self.metrics_url is None:
            self._logs.log(
                logging.WARNING,
                "metrics endpoint not served: address in use",
                address=f"{asked.metrics.host}:{asked.metrics.port}",
            )
        redis_url, database_url = self.servers.start(s.data_dir, s.redis, s.database)
        migrate_apart(database_url)  # Alembic in a child process: `up` lives long
        self._reembed_if_required(database_url)
        self.endpoints = Endpoints(redis_url, database_url)
        self._write_state()
        self._start_worker()
        self._write_state()
        return self.endpoints

    def _reembed_if_required(self, database_url: str) -> None:
        """Stored vectors another embedder made (an upgrade changed the default, or
        a setting changed): re-embed them before any worker would refuse them.

        Raises:
            ConfigurationError: the local model is chosen but not installed here.
        """
        from memjobs_worker.embedding import build_embedder
        from memjobs_worker.ops.reembed import pending, reembed

        assert self._logs is not None
        s = self.settings
        if s.memory.enabled:
            build_embedder(s.model, s.embedding)  # a local model missing on this platform refuses the start
        left = pending(s.embedding, s.memory, s.knowledge, database_url)
        if not left.required:
            return
        logs = self._logs
        started = time.monotonic()
        memories, chunks = reembed(
            s.model,
            s.embedding,
            s.memory,
            s.knowledge,
            database_url,
            progress=lambda what, done, total: logs.log(
                logging.INFO, "reembed", what=what, done=done, total=total, model=left.model
            ),
        )
        self.notices.append(
            f"the embedder changed: re-embedded {memories:,} memories and {chunks:,} "
            f"knowledge chunks with {left.model} in {time.monotonic() - started:.1f} s"
        )

    def _write_state(self) -> None:
        assert self.endpoints is not None
        servers = self.servers
        postgres_restarts, postgres_restarted_at = servers.restarts("PostgreSQL")
        write_stack(
            self.settings.data_dir,
            StackInfo(
                os.getpid(),
                self.endpoints.redis_url,
                self.endpoints.database_url,
                self._started_at,
                metrics_url=self.metrics_url,
                api_url=self.api_url,
                worker_pid=self.worker.pid if self.worker is not None else None,
                redis_pid=servers.redis.pid if servers.redis is not None else None,
                postgres_restarts=postgres_restarts,
                postgres_restarted_at=postgres_restarted_at,
                redis_restarts=servers.restarts("Redis")[0],
                settings=stack_settings(self.settings),
            ),
        )

    def _start_worker(self) -> None:
        assert self.endpoints is not None and self._logs is not None
        env = dict(os.environ)
        env["MEMJOBS_REDIS_URL"] = self.endpoints.redis_url
        env["MEMJOBS_DATABASE_URL"] = self.endpoints.database_url
        # The URL now names the server: say how long its connections stay idle as up's own settings read it.
        env["MEMJOBS_DATABASE_POOL_IDLE_S"] = str(self.settings.database.idle_close_s or 0)
        env["MEMJOBS_DATA_DIR"] = str(self.settings.data_dir)
        if self.metrics_url is not None:
            env["MEMJOBS_METRICS_PORT"] = str(self.settings.metrics.port)  # moved when taken
            prepare_metrics_dir(self.settings.metrics_dir, env)
        else:
            env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        # Its own process group: the terminal's signals (Ctrl-C, hang-up) reach
        # only `up`, which stops the workers in order.
        self.worker = subprocess.Popen(  # noqa: S603 - worker_command(), the worker's own argv
            worker_command(self.processes, self.threads),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
        )
        assert self.worker.stdout is not None
        self._logs.pump(self.worker.stdout)

    def start_sweeper(self) -> None:
        """Every ``sweep_interval_ms`` until stopped: the pending sweeper, and an
        append-only rewrite of the embedded Redis after forgets."""
        assert self.endpoints is not None
        client = producer_client(
            self.settings.redis,
            self.settings.memory,
            self.settings.sessions,
            self.settings.knowledge,
            redis_url=self.endpoints.redis_url,
        )
        runtime = self._runtime = Runtime(self.settings, self.endpoints, client)
        rewrite = self.servers.redis is not None
        rewriter: ForgetRewriter | None = None

        def loop() -> None:
            nonlocal rewriter
            interval_s = self.settings.lifecycle.sweep_interval_ms / 1000
            while not self.stopping.wait(interval_s):
                try:
                    runtime.sweeper.once()
                    if rewrite:
                        rewriter = rewriter or ForgetRewriter(runtime.store, runtime.redis)
                        rewriter.maybe_rewrite()
                except MemjobsError as exc:
                    log.warning("sweep failed", extra={"reason": exc.reason})

        self._sweeper = threading.Thread(target=loop, name="sweeper", daemon=True)
        self._sweeper.start()

    def supervise(self) -> int:
        """Block until SIGINT, SIGTERM or SIGHUP; restart the worker, the embedded
        PostgreSQL or the embedded Redis if one dies. Returns the signal received."""
        received: list[int] = []
        for sig in STOP_SIGNALS:
            # Only record it: a handler that set an Event could deadlock on the
            # lock the interrupted main thread holds inside Event.wait().
            signal.signal(sig, lambda signum, _frame: received.append(signum))
        while not received:
            time.sleep(0.2)
            self.servers.revive_dead(stopping=lambda: bool(received))
            if self.worker is not None and self.worker.poll() is not None and not received:
                log.warning("worker exited; restarting", extra={"code": self.worker.returncode})
                self._start_worker()
                self._write_state()
        return received[0]

    def _notify(self, text: str) -> None:
        if self.notify is not None:
            self.notify(text)

    def stop(self) -> list[str]:
        """Stop everything in order; returns what could not be stopped (empty: clean).

        A stack that did not get the lock owns nothing and stops nothing.
        """
        problems: list[str] = []
        if not self._lock.held:
            return problems
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
                problems.append(
                    "forced: the workers did not finish their jobs within 60 s and were "
                    "killed (a long job, such as a reindex, was cut short: it runs again "
                    "at the next start)"
                )
                os.killpg(self.worker.pid, signal.SIGKILL)
                self.worker.wait()
        if self._runtime is not None:
            self._runtime.close()
            self._runtime.client.close()
        remove_stack(self.settings.data_dir)
        problems += self.servers.stop()
        if self._logs is not None:
            self._logs.close()
        try:
            write_stop_record(self.settings.data_dir, os.getpid(), problems)
        except OSError:
            pass  # the terminal says it all the same
        self._lock.release()
        return problems


@dataclass
class Down:
    """What ``memjobs down`` found and did.

    ``found``: ``"stack"`` (an ``up`` ran and was signalled), ``"leftovers"``
    (a dead ``up``'s processes) or ``"nothing"``; ``pid``: the ``up`` signalled;
    ``stopped``: what is gone now; ``remaining``: what still runs at the deadline;
    ``problems``: what that ``up`` said of its own stop (a forced one: workers
    killed mid-job), empty when it stopped cleanly.
    """

    found: str
    pid: int | None = None
    stopped: list[str] = field(default_factory=list)
    remaining: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _up_pid(data_dir: Path) -> int | None:
    """The ``up`` holding the lock: the state file names it, or (still
    starting, no state file yet) the lock file does."""
    info = read_state_file(data_dir)
    if info is not None and pid_alive(info.pid):
        return info.pid
    try:
        return int(lock_file(data_dir).read_text().strip())
    except (OSError, ValueError):
        return None


def stop_stack(data_dir: Path, *, timeout_s: float, waiting: Callable[[list[str]], None] | None = None) -> Down:
    """Stop the stack of ``data_dir`` and wait until every process it started is gone.

    A running ``up`` gets SIGTERM (it stops in order: sweeper, workers, API,
    PostgreSQL, Redis) and is waited for, with what it started, up to
    ``timeout_s``, ``waiting`` told what still runs at each look. With no
    ``up`` running, what a dead one left is stopped (under the data
    directory's lock, so that no ``up`` starts meanwhile).
    """
    lock = StackLock(data_dir)
    if lock.acquire():
        try:
            if not find_leftovers(data_dir):
                if read_state_file(data_dir) is not None:
                    remove_stack(data_dir)  # a dead up's state file, nothing behind it
                return Down("nothing")
            stopped = stop_leftovers(data_dir, timeout_s=timeout_s / 3, postgres=True)
            return Down("leftovers", stopped=stopped, remaining=[str(x) for x in find_leftovers(data_dir)])
        finally:
            lock.release()
    pid = _up_pid(data_dir)
    if pid is None:
        return Down("nothing")
    started: list[Leftover] = find_leftovers(data_dir)  # what this up runs, read before it stops
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    processes = [Leftover("memjobs up", pid), *started]

    def left() -> list[Leftover]:
        alive = [p for p in processes if p.running()]
        if lock_is_held(data_dir) and not any(p.pid == pid for p in alive):
            alive.insert(0, Leftover("memjobs up", pid))  # the lock's holder, whoever it is now
        return alive

    deadline = time.monotonic() + timeout_s
    while (alive := left()) and time.monotonic() < deadline:
        if waiting is not None:
            waiting([str(p) for p in alive])
        time.sleep(0.1)
    remaining = left()
    return Down(
        "stack",
        pid=pid,
        stopped=[str(p) for p in processes if p not in remaining],
        remaining=[str(p) for p in remaining],
        problems=read_stop_record(data_dir, pid) or [],
    )
