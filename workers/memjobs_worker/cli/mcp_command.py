"""``memjobs mcp --owner OWNER``: the ``nova_knowledge`` server's front profile
(exactly one tool, ``recall``) over stdio, for one owner.

This is how a desktop runtime or a Claude Desktop / Codex style client starts
it (docs/mcp.md has the client's JSON). stdout carries the protocol and
nothing else: the logs go to stderr as JSON Lines. With knowledge off it
refuses to start as every knowledge command does (exit 3, "knowledge is off"),
before it connects to anything.
"""

from __future__ import annotations

import argparse

import anyio.to_thread

from memjobs_client.contracts import owner_key
from memjobs_client.errors import InvalidPayload, KnowledgeOff
from memjobs_worker.cli import exits
from memjobs_worker.endpoints import resolve_endpoints
from memjobs_worker.knowledge.citations import read_cited
from memjobs_worker.logs import configure_logging
from memjobs_worker.mcp_server import Backend, build_server
from memjobs_worker.runtime import open_door
from memjobs_worker.settings import Settings


def mcp(settings: Settings, args: argparse.Namespace) -> int:
    """Serve the owner's recall on stdin/stdout until the client closes them."""
    if not settings.knowledge_enabled:
        raise KnowledgeOff()
    try:
        owner = owner_key(args.owner)
    except ValueError:
        raise InvalidPayload("--owner must not be empty") from None
    configure_logging(level=settings.log_level)  # stderr: stdout is the protocol's
    rt = open_door(settings, resolve_endpoints(settings))
    try:
        store = rt.knowledge  # tables checked (and a stale index rebuilt) before the first call
        server = build_server("front", Backend(
            search=rt.search_knowledge, read_chunk=lambda key, cited: read_cited(store, key, cited),
            owner_of=lambda ctx: owner, run=anyio.to_thread.run_sync))
        anyio.run(server.run_stdio_async)
    finally:
        rt.close()
        rt.client.close()
    return exits.OK


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--owner", required=True, help="the owner whose documents recall searches")
