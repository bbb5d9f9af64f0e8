"""Run the API under uvicorn: in the foreground (``memjobs api``) or on a thread
beside the workers (``memjobs up``), on ``MEMJOBS_API_HOST:MEMJOBS_API_PORT``.

The socket is bound here, before uvicorn starts, so the address (port 0: any
free port) is known at once and a bind failure is a clear start-up error.
Uvicorn's access log is off (a URL may carry a session or task id) and its
error log goes through memjobs' JSON logging.

Connections (docs/security.md): uvicorn's own ``limit_concurrency`` is off
(it answered every path, ``/healthz`` too, with ``503 text/plain`` once
enough connections sat idle); the guard (:mod:`~memjobs_worker.http.limits`)
bounds requests instead. A connection must send each request's headers
within ``api_header_timeout_ms`` (uvicorn has no such timeout: an idle or
header-trickling connection stayed forever) or it gets a 408 problem and is
closed; idle keep-alive connections close after 5 s; the process's
open-file limit is raised to its hard limit, so idle connections run out of
it late.
"""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import ssl
import threading
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from memjobs_client.errors import ConfigurationError
from memjobs_worker.endpoints import Endpoints
from memjobs_worker.http.app import QuietErrors, create_app
from memjobs_worker.http.auth import check_bind
from memjobs_worker.http.problems import MEDIA_TYPE, PROBLEMS, RETRY_AFTER_S
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
            limit_concurrency=None, timeout_keep_alive=KEEP_ALIVE_S,
            proxy_headers=bool(settings.api_forwarded_allow_ips.strip()),
            forwarded_allow_ips=settings.api_forwarded_allow_ips.strip() or None,
            http=header_deadline(settings.api_header_timeout_ms / 1000),
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


def _raw_problem(reason: str, phrase: str, detail: str) -> bytes:
    """A whole problem reply, for the protocol to write before closing (no app involved)."""
    kind = PROBLEMS[reason]
    body = json.dumps({"type": kind.uri, "title": kind.title, "status": kind.status,
                       "reason": kind.reason, "detail": detail}).encode()
    retry = f"retry-after: {RETRY_AFTER_S}\r\n" if kind.status in (408, 429, 503) else ""
    head = (f"HTTP/1.1 {kind.status} {phrase}\r\ncontent-type: {MEDIA_TYPE}\r\n"
            f"content-length: {len(body)}\r\n{retry}"
            "x-content-type-options: nosniff\r\ncache-control: no-store\r\n"
            "connection: close\r\n\r\n")
    return head.encode("ascii") + body


TIMEOUT_REPLY = _raw_problem("request_timeout", "Request Timeout",
                             "the request's headers were not sent in time")
MALFORMED_REPLY = _raw_problem("malformed_request", "Bad Request",
                               "the request could not be parsed as HTTP/1.1")
#: Seconds a refused connection still drops what its client sends before closing.
LINGER_S = 1.0
#: The most bytes a request line and its headers may take (uvicorn's httptools
#: protocol sets no bound: endless header lines grew the heap).
MAX_HEADER_BYTES = 64 * 1024
TOO_LARGE_REPLY = _raw_problem("headers_too_large", "Request Header Fields Too Large",
                               f"the request line and headers are over {MAX_HEADER_BYTES} bytes")


class HeaderDeadline(HttpToolsProtocol):
    """Uvicorn's httptools protocol with a deadline on each request's headers: from
    the connection's start, and from the first byte of each later request, the
    headers must be complete within :attr:`header_timeout_s`, or the connection
    gets a 408 problem and is closed; a request line and headers over
    :data:`MAX_HEADER_BYTES` get a 431 problem. Bytes that are not HTTP get a
    400 problem (uvicorn's own reply is plain text)."""

    header_timeout_s = 10.0
    _deadline: asyncio.TimerHandle | None = None
    _header_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    _discarding = False

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        super().data_received(data)
        if self._deadline is None:  # no request's headers pending
            self._header_bytes = 0
            return
        self._header_bytes += len(data)
        if self._header_bytes > MAX_HEADER_BYTES and not self.transport.is_closing():
            self._disarm()
            if self.cycle is not None and not self.cycle.response_complete:
                self.transport.close()
                return
            self.transport.write(TOO_LARGE_REPLY)
            self._close_lingering()

    def _close_lingering(self) -> None:
        """Close after a reply while the client may still be sending: our side is shut
        and what still comes is dropped for a moment (closing at once would reset the
        connection and the client could lose the reply)."""
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._discarding = True
        self.loop.call_later(LINGER_S, self.transport.close)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        self._header_bytes = 0
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.header_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A request is being answered and the next one's headers (pipelined) are not
            # complete: they get another period once the answer is out of the way.
            self._arm()
            return
        self.transport.write(TIMEOUT_REPLY)
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """Uvicorn's reply to bytes that are not HTTP, as a problem document."""
        self.transport.write(MALFORMED_REPLY)
        self.transport.close()


def header_deadline(seconds: float) -> type[Any]:
    """:class:`HeaderDeadline` with this deadline."""
    return type("HeaderDeadline", (HeaderDeadline,), {"header_timeout_s": seconds})
