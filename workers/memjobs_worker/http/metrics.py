"""The API's own Prometheus metrics, in a registry of their own.

Labels are route *templates* (``/v1/sessions/{session_id}/end``), methods,
status codes and actor names: never an owner id, a session id or any text.
The API process serves them at ``/metrics``.

:class:`CountEnqueued` is a Dramatiq middleware any producer can add to the
broker it hands :class:`~memjobs_client.MemjobsClient`: it counts each job the
producer enqueued (the counter workers keep counts only their own follow-ups).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from dramatiq.middleware import Middleware
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memjobs_worker.http.slots import REFUSED

log = logging.getLogger("memjobs.api")

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class ApiMetrics:
    """The counters and histogram of one API instance (its own registry, so two
    apps in one process, as in the tests, do not collide)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "memjobs_api_requests_total",
            "HTTP requests, by route template, method and status.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "memjobs_api_request_duration_seconds",
            "HTTP request latency, by route template.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge("memjobs_api_requests_in_flight", "HTTP requests being served.", registry=self.registry)
        self.refused = Counter(
            "memjobs_api_refused_total",
            "Requests the guard refused (and replies abandoned unread), by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.enqueued = Counter(
            "memjobs_producer_jobs_enqueued_total",
            "Jobs enqueued by this producer (the HTTP API), by actor.",
            ["actor"],
            registry=self.registry,
        )


class CountEnqueued(Middleware):
    """Dramatiq middleware: count every message this broker enqueued, by actor."""

    def __init__(self, counter: Counter) -> None:
        self.counter = counter

    def after_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        self.counter.labels(message.actor_name).inc()


class RecordRequests:
    """ASGI middleware: one sample and one access-log line per request, labelled with
    the matched route's template (never the path itself: it may carry a session id)."""

    def __init__(self, app: ASGIApp, *, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.in_flight.dec()
            route = scope.get("route")
            template = getattr(route, "path_format", None) or "unmatched"
            self.metrics.requests.labels(template, scope["method"], str(status)).inc()
            seconds = time.perf_counter() - started
            self.metrics.latency.labels(template).observe(seconds)
            # Refusals and failures at INFO; the hot 2xx path at DEBUG (a JSON line costs
            # about a fifth of a remember's CPU); the guard's refusals at DEBUG too: it
            # counts them and logs one line per reason per interval (a flood of them
            # would otherwise be a line each).
            refused = REFUSED in scope.get("state", {})
            log.log(
                logging.INFO if status >= 400 and not refused else logging.DEBUG,
                "request",
                extra={
                    "route": template,
                    "method": scope["method"],
                    "status": status,
                    "duration_ms": round(seconds * 1000, 2),
                },
            )
