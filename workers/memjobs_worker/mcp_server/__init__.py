"""The knowledge corpus over MCP: the server ``nova_knowledge`` and its bounded
answers (docs/mcp.md). The doors serve it: ``memjobs mcp`` over stdio, the
HTTP API at ``/mcp``."""

from memjobs_worker.mcp_server.answers import ChunkAnswer, Citation, RecallAnswer, RecallHit
from memjobs_worker.mcp_server.server import PROFILE_TOOLS, SERVER_NAME, Backend, Profile, build_server

__all__ = [
    # the server
    "build_server",
    "Backend",
    "Profile",
    "PROFILE_TOOLS",
    "SERVER_NAME",
    # its answers
    "RecallAnswer",
    "RecallHit",
    "ChunkAnswer",
    "Citation",
]
