"""Run the API under uvicorn: in the foreground (``memjobs api``) or on a thread
beside the workers (``memjobs up``), on ``MEMJOBS_API_HOST:MEMJOBS_API_PORT``.

The socket is bound here, before uvicorn starts, so the address (port 0: any
free port) is known at once and a bind failure is a clear start-up error.
Uvicorn's access log is off (a URL may carry a session or task id) and its
error log goes through memjobs' JSON logging.
"""

from __future__ import annotations

import socket
import ssl
import threading

import uvicorn

from memjobs_client.errors import ConfigurationError
from memjobs_worker.endpoints import Endpoints
from memjobs_worker.http.app import QuietErrors, create_app
from memjobs_worker.http.auth import check_bind
from memjobs_worker.settings import Settings


class ApiServer:
    """One uvicorn server of the API.

    Parameters:
        settings: the API settings (checked by :func:`~memjobs_worker.http.auth.check_bind`).
        endpoints: where Redis and the state store are.

    Raises:
        ConfigurationError: unsafe settings, or the address cannot be bound.
    """

    def __init__(self, settings: Settings, endpoints: Endpoints) -> None:
        check_bind(settings)
        self.settings = settings
        self.sock = _bind(settings.api_host, settings.api_port)
        self.tls = settings.api_tls_cert is not None
        config = uvicorn.Config(
            QuietErrors(create_app(settings, endpoints)), access_log=False, log_config=None,
            lifespan="on", timeout_graceful_shutdown=10, server_header=False,
            limit_concurrency=settings.api_max_in_flight * 4,
            ssl_certfile=str(settings.api_tls_cert) if settings.api_tls_cert else None,
            ssl_keyfile=str(settings.api_tls_key) if settings.api_tls_key else None,
            ssl_version=ssl.PROTOCOL_TLS_SERVER,
        )
        if self.tls:
            try:
                config.load()
            except (OSError, ssl.SSLError) as exc:
                self.sock.close()
                raise ConfigurationError(f"cannot load the TLS certificate or key: {exc}") from None
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"{'https' if self.tls else 'http'}://{shown}:{port}"

    def run(self) -> None:
        """Serve in the foreground until SIGINT/SIGTERM."""
        self.server.run(sockets=[self.sock])

    def start(self, timeout_s: float = 30.0) -> str:
        """Serve on a daemon thread; return the URL once the server accepts requests."""
        self._thread = threading.Thread(target=lambda: self.server.run(sockets=[self.sock]),
                                        name="memjobs-api", daemon=True)
        self._thread.start()
        deadline = threading.Event()
        for _ in range(int(timeout_s / 0.02)):
            if self.server.started or not self._thread.is_alive():
                break
            deadline.wait(0.02)
        if not self.server.started:
            raise ConfigurationError("the HTTP API did not start (see the log)")
        return self.url

    def stop(self, timeout_s: float = 15.0) -> bool:
        """Stop the thread's server; True when it finished in time."""
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
            return not self._thread.is_alive()
        return True


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(
            f"cannot listen on {host}:{port} (MEMJOBS_API_HOST, MEMJOBS_API_PORT): {exc.strerror}"
        ) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock
