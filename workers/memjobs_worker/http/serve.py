"""Run the API under uvicorn: in the foreground (``memjobs api``) or on a thread
beside the workers (``memjobs up``), on ``MEMJOBS_API_HOST:MEMJOBS_API_PORT``.

The socket is bound here, before uvicorn starts, so the address (port 0: any
free port) is known at once and a bind failure is a clear start-up error.
Uvicorn's access log is off (a URL may carry a session or task id) and its
error log goes through memjobs' JSON logging.

Connections (docs/security.md) are bounded by uvicorn's own settings, nothing
of its internals: the h11 protocol with ``h11_max_incomplete_event_size`` (a
request line and headers still arriving hold at most
:data:`~memjobs_worker.http.guard.MAX_HEADER_BYTES`; httptools has no such
bound, and is chosen with ``api_http_parser`` only behind a proxy that has),
``timeout_keep_alive`` for idle connections between requests, and
``limit_concurrency`` off (it answered every path, ``/healthz`` too, with
``503 text/plain`` once enough connections sat idle). Everything the
application knows (tokens, slots, bodies, a header block that arrived whole
but too large) is the guard's, :mod:`~memjobs_worker.http.guard`. Uvicorn has
no deadline on a request's headers: ``api_header_timeout_ms`` is
:mod:`~memjobs_worker.http.deadline`'s, a protocol class given to uvicorn's
``http`` setting that holds the parser's own (for h11 and httptools alike) and
closes a connection whose headers are late, and the outermost middleware that
tells it when a request starts and ends. The process's open-file limit is
raised to its hard limit, so idle connections run out of it late.
"""

from __future__ import annotations

import logging
import resource
import socket
import ssl
import threading

import uvicorn

from memjobs_client.errors import ConfigurationError
from memjobs_worker.endpoints import Endpoints
from memjobs_worker.http.app import QuietErrors, create_app
from memjobs_worker.http.auth import check_bind
from memjobs_worker.http.deadline import MarksRequests, header_deadline
from memjobs_worker.http.guard import MAX_HEADER_BYTES
from memjobs_worker.http.slots import RefusalLog
from memjobs_worker.settings import Settings


class ApiServer:
    """One uvicorn server of the API.

    Parameters:
        settings: every section, for :func:`~memjobs_worker.http.app.create_app` (the
            API's composition root); the API section is checked by
            :func:`~memjobs_worker.http.auth.check_bind` first.
        endpoints: where Redis and the state store are.

    Raises:
        ConfigurationError: unsafe settings, or the address cannot be bound.
    """

    def __init__(self, settings: Settings, endpoints: Endpoints) -> None:
        check_bind(settings.api)
        self.sock = _bind(settings.api.host, settings.api.port)
        self.tls = settings.api.tls_cert is not None
        app = create_app(settings, endpoints)
        refusals: RefusalLog = app.state.refusals
        self._refusals = refusals
        SERVER_LINES.attach(refusals)
        protocol = header_deadline(
            settings.api.http_parser,
            settings.api.header_timeout_ms / 1000,
            on_expired=lambda: refusals.note("header_timeout"),
        )
        config = uvicorn.Config(
            MarksRequests(QuietErrors(app)),
            access_log=False,
            log_config=None,
            lifespan="on",
            timeout_graceful_shutdown=10,
            server_header=False,
            limit_concurrency=None,
            timeout_keep_alive=KEEP_ALIVE_S,
            proxy_headers=bool(settings.api.forwarded_allow_ips.strip()),
            forwarded_allow_ips=settings.api.forwarded_allow_ips.strip() or None,
            http=protocol,
            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
            ssl_certfile=str(settings.api.tls_cert) if settings.api.tls_cert else None,
            ssl_keyfile=str(settings.api.tls_key) if settings.api.tls_key else None,
            ssl_version=ssl.PROTOCOL_TLS_SERVER,
        )
        if self.tls:
            try:
                config.load()
            except (OSError, ssl.SSLError) as exc:
                self.sock.close()
                raise ConfigurationError(f"cannot load the TLS certificate or key: {exc}") from None
        self.server = uvicorn.Server(config)
        raise_open_files_limit()
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
        self._thread = threading.Thread(
            target=lambda: self.server.run(sockets=[self.sock]), name="memjobs-api", daemon=True
        )
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
        SERVER_LINES.detach(self._refusals)
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


#: Seconds an idle keep-alive connection stays open between requests.
KEEP_ALIVE_S = 5


def raise_open_files_limit() -> int:
    """Raise the soft limit on open files to the hard one (each connection is one);
    returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


#: The server's own log lines, one per request, that the guard already counts (or that
#: it counts here) by reason: under a flood they would be a line per request.
_COUNTED_LINES = {
    "Invalid HTTP request received.": "malformed_request",
    "ASGI callable returned without completing response.": None,  # reply_not_read, counted
}


class CountedServerLines(logging.Filter):
    """The filter on uvicorn's error log: the lines of :data:`_COUNTED_LINES` become
    counted refusals (one log line per reason per interval) instead of a line each.

    One for the process (:data:`SERVER_LINES`), on the logger once: the first filter
    of a logger to refuse a line ends it, so a filter per server would leave the line
    to whichever server came first. Noted on the newest server attached (a process
    serves one API; a test may start several)."""

    def __init__(self) -> None:
        super().__init__()
        self._logs: list[RefusalLog] = []
        self._lock = threading.Lock()

    def attach(self, refusals: RefusalLog) -> None:
        with self._lock:
            self._logs.append(refusals)
            logger = logging.getLogger("uvicorn.error")
            if self not in logger.filters:
                logger.addFilter(self)

    def detach(self, refusals: RefusalLog) -> None:
        with self._lock:
            if refusals in self._logs:
                self._logs.remove(refusals)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        if message not in _COUNTED_LINES:
            return True
        reason = _COUNTED_LINES[message]
        with self._lock:
            newest = self._logs[-1] if self._logs else None
        if reason is not None and newest is not None:
            newest.note(reason)
        return False


#: The process's one filter of uvicorn's counted lines.
SERVER_LINES = CountedServerLines()
