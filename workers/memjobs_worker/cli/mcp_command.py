"""``memjobs mcp --owner OWNER``: an MCP server over stdio, for one owner.

- by default the ``nova_knowledge`` server's front profile (exactly one tool,
  ``recall``): with knowledge off it refuses to start as every knowledge
  command does (exit 3, "knowledge is off"), before it connects to anything;
- ``--memory``: the ``nova_memory`` server (``memory``, ``recall``,
  ``memory__recall``: the owner's personal memory); with personal memory off
  (``NOVA_AUDIO_AGENT_MEMORY_PROVIDER=off``) it refuses to start (``memory_off``).

This is how a desktop runtime or a Claude Desktop / Codex style client starts
it (docs/mcp.md has the client's JSON). stdout carries the protocol and
nothing else: the logs go to stderr as JSON Lines.
"""

from __future__ import annotations

import argparse

import anyio.to_thread

from memjobs_client.contracts import owner_key
from memjobs_client.errors import InvalidPayload, KnowledgeOff, MemoryOff
from memjobs_client.gateway.tools import MemoryTools
from memjobs_worker.cli import exits
from memjobs_worker.endpoints import resolve_endpoints
from memjobs_worker.knowledge.citations import read_cited
from memjobs_worker.knowledge.search import search_with
from memjobs_worker.logs import configure_logging
from memjobs_worker.mcp_server import Backend, build_server
from memjobs_worker.mcp_server.memory_server import (
    TOOL_SCOPES,
    MemoryBackend,
    ServiceToolBackend,
    build_memory_server,
)
from memjobs_worker.runtime import open_door
from memjobs_worker.settings import Settings

#: The local user's own process: every tool.
ALL_SCOPES = frozenset(TOOL_SCOPES.values())


def mcp(settings: Settings, args: argparse.Namespace) -> int:
    """Serve the owner's recall (or, with ``--memory``, personal memory) on stdin/stdout
    until the client closes them."""
    if args.memory and not settings.memory.enabled:
        raise MemoryOff()
    if not args.memory and not settings.knowledge.enabled:
        raise KnowledgeOff()
    try:
        owner = owner_key(args.owner)
    except ValueError:
        raise InvalidPayload("--owner must not be empty") from None
    configure_logging(level=settings.logs.level)  # stderr: stdout is the protocol's
    rt = open_door(settings, resolve_endpoints(settings.data_dir, settings.redis, settings.database))
    try:
        if args.memory:
            tools = MemoryTools(ServiceToolBackend(rt, rt.personal_memory.recall), source="mcp")
            server = build_memory_server(
                MemoryBackend(
                    tools=tools,
                    owner_of=lambda ctx: str(args.owner),
                    scopes_of=lambda ctx: ALL_SCOPES,
                    run=anyio.to_thread.run_sync,
                )
            )
        else:
            store = rt.knowledge  # tables checked (and a stale index rebuilt) before the first call
            server = build_server(
                "front",
                Backend(
                    search=lambda key, query, k: search_with(store, rt.knowledge_embedder, key, query, k),
                    read_chunk=lambda key, cited: read_cited(store, key, cited),
                    owner_of=lambda ctx: owner,
                    run=anyio.to_thread.run_sync,
                ),
            )
        anyio.run(server.run_stdio_async)
    finally:
        rt.close()
        rt.client.close()
    return exits.OK


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--owner", required=True, help="the owner whose documents (or memory) the tools answer from")
    p.add_argument(
        "--memory",
        action="store_true",
        help="serve nova_memory (memory, recall, memory__recall: the owner's personal memory) "
        "instead of nova_knowledge",
    )
