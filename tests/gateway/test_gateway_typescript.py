"""The TypeScript gateway pieces against a live API: the MemoryProvider's contract
(``test/provider.test.mjs``: the seed's provider rules) and the model's tools and their
dispatcher (``test/tools.test.mjs``), both run by ``node --test`` against one seeded server;
and the tools' schemas are the Python client's, word for word."""

from __future__ import annotations

import json
import subprocess

from memjobs_client.gateway import TOOL_DEFINITIONS
from tests.gateway.conftest import SEEDED_OWNER
from tests.http.test_http_typescript import CLIENT, NODE, assert_node_tests_pass, needs_node, tokened_env
from tests.support.http import Api


@needs_node
def test_provider_contract_and_tools_against_the_live_api(seeded_api: Api) -> None:
    env = {**tokened_env(seeded_api.url), "MEMJOBS_TOOLS_OWNER": SEEDED_OWNER}
    assert_node_tests_pass("test/provider.test.mjs", "test/tools.test.mjs", passed=11, env=env)


@needs_node
def test_the_typescript_and_python_tool_schemas_are_the_same() -> None:
    assert NODE is not None
    script = "import('./src/tools.js').then((m) => console.log(JSON.stringify(m.MEMORY_TOOLS)))"
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", script], cwd=CLIENT, capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == json.loads(json.dumps(TOOL_DEFINITIONS))
