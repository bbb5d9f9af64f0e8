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
import threading
from collections.abc import Callable
from pathlib import Path

import redis
from dramatiq.middleware import Middleware
from prometheus_client import CollectorRegistry, multiprocess, start_http_server

from workers.collectors import LedgerCollector, QueueCollector
from workers.db import create_db_engine
from workers.endpoints import resolve_endpoints
from workers.logs import configure_logging
from workers.settings import Settings, load_settings
from workers.store.sql import SqlStateStore


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
    """Fork target: serve /metrics until SIGTERM."""
    settings = load_settings()
    configure_logging(level=settings.log_level, adopt=True)
    server, thread = start_http_server(settings.metrics_port, addr=settings.metrics_host,
                                       registry=build_registry(settings))
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
    server.shutdown()
    thread.join()
    return 0


class MetricsEndpoint(Middleware):
    """Asks the Dramatiq CLI to fork :func:`serve`, and marks dead processes' gauges."""

    @property
    def forks(self) -> list[Callable[[], int]]:
        return [serve] if os.environ.get("PROMETHEUS_MULTIPROC_DIR") else []

    def after_worker_shutdown(self, broker: object, worker: object) -> None:
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if directory and Path(directory).exists():
            multiprocess.mark_process_dead(os.getpid(), directory)  # type: ignore[no-untyped-call]
