"""What ``memjobs_client.gateway`` exports, and what importing it costs a gateway:
no engine, model or database library, and no HTTP library beyond the standard one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import memjobs_client.gateway as gateway
from tests.support.harness import REPO

GATEWAY_API = {
    "GatewayApi",
    "ApiError",
    "MemjobsMemoryProvider",
    "MEMORY_PROVIDER_PROTOCOL_VERSION",
    "PROTOCOL_VERSION",
    "MEMORY_DOCUMENTS",
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
}
HEAVY = ("mem0", "openai", "sqlalchemy", "psycopg", "alembic", "memjobs_worker", "httpx", "requests", "mcp")


def test_gateway_all_lists_exactly_its_public_api() -> None:
    assert len(gateway.__all__) == len(set(gateway.__all__))
    assert set(gateway.__all__) == GATEWAY_API
    assert [name for name in gateway.__all__ if not hasattr(gateway, name)] == []


def test_importing_the_gateway_pulls_in_no_heavy_or_http_library() -> None:
    code = "import json, sys, memjobs_client.gateway; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert "memjobs_client.gateway.provider" in loaded
    assert sorted(m for m in loaded if m.split(".")[0] in HEAVY) == []
