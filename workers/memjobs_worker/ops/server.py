"""The Prometheus endpoint of a host's workers.

``memjobs worker`` and ``memjobs up`` point ``PROMETHEUS_MULTIPROC_DIR`` at an
emptied directory before any worker process starts; Dramatiq forks
:func:`serve` (the ``forks`` of :class:`MetricsEndpoint`) once per host, which
merges every process's samples and adds the scrape-time collectors. It binds
to ``MEMJOBS_METRICS_HOST`` (loopback by default) and ``MEMJOBS_METRICS_PORT``.

Before the workers start, :func:`probe_metrics_address` tries the address: a
port another process holds is one clear warning (metrics off for this run) or,
with ``MEMJOBS_METRICS_BIND_FAILURE=fail``, a start-up error; never a traceback
in the log and a banner naming an address that serves someone else's metrics.
``memjobs up`` asks :func:`claim_metrics_address` instead: with
``MEMJOBS_METRICS_PORT`` left at its default and that port taken (another stack
on this machine), it serves metrics on a free port, as it does the API.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import redis
from dramatiq.middleware import Middleware
from prometheus_client import CollectorRegistry, multiprocess, start_http_server

from memjobs_client.errors import ConfigurationError
from memjobs_worker.db import create_db_engine
from memjobs_worker.embedded.process import free_port
from memjobs_worker.endpoints import Endpoints, resolve_endpoints
from memjobs_worker.logs import configure_logging
from memjobs_worker.memory.store.sql import SqlStateStore
from memjobs_worker.ops.collectors import LedgerCollector, QueueCollector
from memjobs_worker.settings import MetricsSettings, load_settings

log = logging.getLogger(__name__)


def metrics_url(metrics: MetricsSettings) -> str:
    host = metrics.host
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{metrics.port}/metrics"


def probe_metrics_address(metrics: MetricsSettings) -> tuple[str | None, str | None]:
    """Whether the metrics address can be bound right now: ``(url, None)``, or
    ``(None, warning)`` when it cannot and the setting says warn.

    Raises:
        ConfigurationError: it cannot be bound and ``MEMJOBS_METRICS_BIND_FAILURE=fail``.
    """
    if metrics.mode == "off":
        return None, None
    exc = _bindable(metrics.host, metrics.port)
    if exc is not None:
        problem = (
            f"metrics endpoint {metrics.host}:{metrics.port} cannot be "
            f"bound ({exc.strerror or exc}): another process holds it. Metrics are off for "
            "this run; set MEMJOBS_METRICS_PORT to a free port (one per worker host)"
        )
        if metrics.bind_failure == "fail":
            raise ConfigurationError(problem.replace("Metrics are off for this run; set", "Set")) from None
        return None, problem
    return metrics_url(metrics), None


def _bindable(host: str, port: int) -> OSError | None:
    """None when ``host:port`` can be bound right now, else why not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _name, address = infos[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server does
            sock.bind(address)
    except OSError as exc:
        return exc
    return None


def claim_metrics_address(metrics: MetricsSettings) -> tuple[MetricsSettings, str | None, str | None]:
    """:func:`probe_metrics_address` for ``memjobs up``: a default port that is
    taken moves to a free one. Returns the metrics settings to run with (their
    ``port`` the one served), the URL (None: metrics off) and a notice
    for the terminal (None: nothing to say).

    Raises:
        ConfigurationError: a port set explicitly cannot be bound and
            ``MEMJOBS_METRICS_BIND_FAILURE=fail``.
    """
    if metrics.mode == "off" or "port" in metrics.model_fields_set or _bindable(metrics.host, metrics.port) is None:
        url, problem = probe_metrics_address(metrics)
        return metrics, url, problem
    moved = metrics.model_copy(update={"port": free_port(metrics.host)})
    url, problem = probe_metrics_address(moved)
    if problem is not None:  # lost the free port already: say so, metrics off
        return metrics, None, problem
    return moved, url, (f"port {metrics.port} is taken; metrics are served on a free port: {url}")


def prepare_metrics_dir(directory: Path, env: dict[str, str]) -> None:
    """Empty the multiprocess ``directory`` (``Settings.metrics_dir``) and name it in
    ``env`` (done before the worker processes start: stale files of dead processes
    would be summed)."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    env["PROMETHEUS_MULTIPROC_DIR"] = str(directory)


def build_registry(endpoints: Endpoints, *, idle_close_s: float | None = None) -> CollectorRegistry:
    """The collectors of /metrics, reading ``endpoints``; the ledger's one connection
    closed once unused for ``idle_close_s`` (None: kept)."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    registry.register(QueueCollector(redis.Redis.from_url(endpoints.redis_url, socket_timeout=5)))
    registry.register(
        LedgerCollector(SqlStateStore(create_db_engine(endpoints.database_url, pool_size=1, idle_close_s=idle_close_s)))
    )
    return registry


def serve() -> int:
    """Fork target: serve /metrics until Dramatiq's SIGTERM handler exits the process.

    The HTTP server runs in a daemon thread; the main thread only waits for
    signals (a handler of our own that set an Event could deadlock against
    the main thread waiting on that Event).
    """
    settings = load_settings()
    configure_logging(level=settings.logs.level, adopt=True)
    endpoints = resolve_endpoints(settings.data_dir, settings.redis, settings.database)
    if not serve_on_thread(settings.metrics, endpoints, idle_close_s=settings.database.idle_close_s):
        return 0
    while True:
        signal.pause()


def serve_on_thread(metrics: MetricsSettings, endpoints: Endpoints, *, idle_close_s: float | None = None) -> bool:
    """Serve /metrics from a daemon thread of this process (the pools of a
    small host share one process, and it serves), its collectors reading
    ``endpoints`` (:func:`build_registry`); False when the address was taken between the probe and now
    (one warning, and the workers run on)."""
    try:
        start_http_server(
            metrics.port, addr=metrics.host, registry=build_registry(endpoints, idle_close_s=idle_close_s)
        )
    except OSError as exc:
        log.warning(
            "metrics endpoint not served: address in use",
            extra={"address": f"{metrics.host}:{metrics.port}", "error": exc.strerror or str(exc)},
        )
        return False
    return True


class MetricsEndpoint(Middleware):
    """Asks the Dramatiq CLI to fork :func:`serve` (unless ``serve_endpoint`` is
    off: another pool of the host serves), and marks dead processes' gauges."""

    def __init__(self, serve_endpoint: bool = True) -> None:
        self.serve_endpoint = serve_endpoint

    @property
    def forks(self) -> list[Callable[[], int]]:
        return [serve] if self.serve_endpoint and os.environ.get("PROMETHEUS_MULTIPROC_DIR") else []

    def after_worker_shutdown(self, broker: object, worker: object) -> None:
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if directory and Path(directory).exists():
            multiprocess.mark_process_dead(os.getpid(), directory)  # type: ignore[no-untyped-call]
