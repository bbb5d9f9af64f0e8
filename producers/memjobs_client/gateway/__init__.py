"""The gateway's side of the seeds, for a Python gateway (issue 34): the
``MemoryProvider`` it injects, and its model's memory tools with their
dispatcher, on memjobs' HTTP API (standard library only).

    from memjobs_client.gateway import GatewayApi, MemjobsMemoryProvider, MemoryTools, HttpToolBackend

    api = GatewayApi("https://memjobs.internal", token)
    provider = MemjobsMemoryProvider(api)
    tools = MemoryTools(HttpToolBackend(api, provider), source="realtime")
    answer = tools.dispatch("memory", '{"op": "read", "doc": "MEMORY.md"}', owner_id=owner)
"""

from memjobs_client.gateway.http import ApiError, GatewayApi
from memjobs_client.gateway.provider import (
    MEMORY_DOCUMENTS,
    MEMORY_PROVIDER_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    MemjobsMemoryProvider,
)
from memjobs_client.gateway.schemas import (
    MEMORY_RECALL_TOOL,
    MEMORY_TOOL,
    RECALL_TOOL,
    TOOL_DEFINITIONS,
    TOOL_ERRORS,
    USER_DATA_NOTICE,
)
from memjobs_client.gateway.tools import (
    HttpToolBackend,
    MemoryTools,
    ToolBackend,
    ToolRefusal,
    check_arguments,
)

__all__ = [
    # the HTTP API
    "GatewayApi",
    "ApiError",
    # the provider
    "MemjobsMemoryProvider",
    "MEMORY_PROVIDER_PROTOCOL_VERSION",
    "PROTOCOL_VERSION",
    "MEMORY_DOCUMENTS",
    # the tools
    "TOOL_DEFINITIONS",
    "MEMORY_TOOL",
    "RECALL_TOOL",
    "MEMORY_RECALL_TOOL",
    "TOOL_ERRORS",
    "USER_DATA_NOTICE",
    "MemoryTools",
    "ToolBackend",
    "ToolRefusal",
    "HttpToolBackend",
    "check_arguments",
]
