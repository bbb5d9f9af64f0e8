"""What ``memjobs_client.gateway`` exports, and what importing it costs a gateway:
no engine, model or database library, and no HTTP library beyond the standard one."""

from __future__ import annotations

import memjobs_client.gateway as gateway
from tests.support.public_api import assert_exported_from_homes, modules_loaded_by_importing, names_of

#: The public names by the module each comes from.
GATEWAY_HOMES = {
    "http": "GatewayApi ApiError",
    "provider": "MemjobsMemoryProvider MEMORY_PROVIDER_PROTOCOL_VERSION PROTOCOL_VERSION MEMORY_DOCUMENTS",
    "schemas": "TOOL_DEFINITIONS MEMORY_TOOL RECALL_TOOL MEMORY_RECALL_TOOL TOOL_ERRORS USER_DATA_NOTICE",
    "tools": "MemoryTools ToolBackend ToolRefusal HttpToolBackend check_arguments",
}
HEAVY = ("mem0", "openai", "sqlalchemy", "psycopg", "alembic", "memjobs_worker", "httpx", "requests", "mcp")


def test_gateway_all_lists_exactly_its_public_api() -> None:
    assert len(gateway.__all__) == len(set(gateway.__all__))
    assert set(gateway.__all__) == names_of(GATEWAY_HOMES)
    assert [name for name in gateway.__all__ if not hasattr(gateway, name)] == []


def test_gateway_exports_each_name_as_the_object_of_its_home_module() -> None:
    assert_exported_from_homes(gateway, GATEWAY_HOMES)


def test_importing_the_gateway_pulls_in_no_heavy_or_http_library() -> None:
    loaded = modules_loaded_by_importing("memjobs_client.gateway")
    assert "memjobs_client.gateway.provider" in loaded
    assert sorted(m for m in loaded if m.split(".")[0] in HEAVY) == []
