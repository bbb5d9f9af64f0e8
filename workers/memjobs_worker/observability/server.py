"""The Prometheus endpoint of a host's workers.

``memjobs worker`` and ``memjobs up`` point ``PROMETHEUS_MULTIPROC_DIR`` at an
emptied directory before any worker process starts; Dramatiq forks
:func:`serve` (the ``forks`` of :class:`MetricsEndpoint`) once per host, which
merges every process's samples and adds the scrape-time collectors. It binds
to ``MEMJOBS_METRICS_HOST`` (loopback by default) and ``MEMJOBS_METRICS_PORT``.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import redis
from dramatiq.middleware import Middleware
from prometheus_client import CollectorRegistry, multiprocess, start_http_server

from memjobs_worker.db import create_db_engine
from memjobs_worker.endpoints import resolve_endpoints
from memjobs_worker.logs import configure_logging
from memjobs_worker.memory.store.sql import SqlStateStore
from memjobs_worker.observability.collectors import LedgerCollector, QueueCollector
from memjobs_worker.settings import Settings, load_settings


def prepare_metrics_dir(settings: Settings, env: dict[str, str]) -> None:
    """Empty the multiprocess directory and name it in ``env`` (done before the
    worker processes start: stale files of dead processes would be summed)."""
    directory = settings.metrics_dir
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    env["PROMETHEUS_MULTIPROC_DIR"] = str(directory)


def build_registry(settings: Settings) -> CollectorRegistry:
    endpoints = resolve_endpoints(settings)
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    registry.register(QueueCollector(redis.Redis.from_url(endpoints.redis_url, socket_timeout=5)))
    registry.register(LedgerCollector(SqlStateStore(create_db_engine(endpoints.database_url, pool_size=1))))
    return registry


def serve() -> int:
    """Fork target: serve /metrics until Dramatiq's SIGTERM handler exits the process.

    The HTTP server runs in a daemon thread; the main thread only waits for
    signals (a handler of our own that set an Event could deadlock against
    the main thread waiting on that Event).
    """
    settings = load_settings()
    configure_logging(level=settings.log_level, adopt=True)
    start_http_server(settings.metrics_port, addr=settings.metrics_host,
                      registry=build_registry(settings))
    while True:
        signal.pause()


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
