"""``memjobs api``: the HTTP API in the foreground; and the API beside the workers of ``memjobs up``.

``memjobs up`` calls :func:`start_beside_stack` once the stack is up: the API
runs on a thread of the ``up`` process, its URL printed and written to the
stack file (``run/stack.json``, field ``api_url``) so other commands and tests
find it. With ``MEMJOBS_API_PORT`` left at its default and that port taken
(another stack on this machine), ``up`` serves on a free port instead and says
so; a port set explicitly that cannot be bound is a start-up error.
"""

from __future__ import annotations

import argparse
from typing import Any

from memjobs_client.errors import ConfigurationError
from memjobs_worker.cli import exits
from memjobs_worker.embedded.stack import record_api_url
from memjobs_worker.endpoints import Endpoints, resolve_endpoints
from memjobs_worker.logs import configure_logging
from memjobs_worker.settings import Settings


def api(settings: Settings, args: argparse.Namespace) -> int:
    """Serve the API until SIGINT/SIGTERM."""
    from memjobs_worker.http.serve import ApiServer

    overrides: dict[str, Any] = {}
    if args.host is not None:
        overrides["host"] = args.host
    if args.port is not None:
        overrides["port"] = args.port
    if overrides:
        settings = settings.updated(api=overrides)
    server = ApiServer(
        settings, resolve_endpoints(settings.data_dir, settings.redis, settings.database)
    )  # refuses unsafe settings first
    configure_logging(level=settings.logs.level)
    print(f"memjobs API on {server.url}; Ctrl-C stops it", flush=True)
    server.run()
    return exits.OK


def start_beside_stack(settings: Settings, endpoints: Endpoints) -> Any:
    """Start the API on a thread of ``memjobs up``; returns the server (``.url``, ``.stop()``)."""
    from memjobs_worker.http.serve import ApiServer

    try:
        server = ApiServer(settings, endpoints)
    except ConfigurationError as exc:
        if "port" in settings.api.model_fields_set or "cannot listen" not in str(exc):
            raise
        server = ApiServer(settings.updated(api={"port": 0}), endpoints)
        print(f"memjobs: port {settings.api.port} is taken; the API serves on a free port", flush=True)
    url = server.start()
    record_api_url(settings.data_dir, url)
    return server


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=None, help="bind address (default MEMJOBS_API_HOST)")
    p.add_argument("--port", type=int, default=None, help="port, 0 for any free one (default MEMJOBS_API_PORT)")
