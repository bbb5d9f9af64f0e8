"""MCP servers (docs/mcp.md): the knowledge corpus (``nova_knowledge``) and its
bounded answers, and the user's personal memory (``nova_memory``). The doors
serve them: ``memjobs mcp`` (``--memory``) over stdio, the HTTP API at ``/mcp``
and ``/mcp/memory``."""

from memjobs_worker.mcp_server.answers import ChunkAnswer, Citation, RecallAnswer, RecallHit
from memjobs_worker.mcp_server.memory_server import (
    MEMORY_SERVER_NAME,
    MemoryBackend,
    ServiceToolBackend,
    build_memory_server,
)
from memjobs_worker.mcp_server.server import PROFILE_TOOLS, SERVER_NAME, Backend, Profile, build_server

__all__ = [
    # the server
    "build_server",
    "Backend",
    "Profile",
    "PROFILE_TOOLS",
    "SERVER_NAME",
    # personal memory
    "build_memory_server",
    "MemoryBackend",
    "ServiceToolBackend",
    "MEMORY_SERVER_NAME",
    # its answers
    "RecallAnswer",
    "RecallHit",
    "ChunkAnswer",
    "Citation",
]
