"""The TypeScript client's own tests (``node --test``), run against a real API
(uvicorn, the test session's Redis and PostgreSQL, an in-process worker):
a tokened one, and an open one (loopback, no token: what ``memjobs up`` serves).

Skipped, saying why, where Node.js is absent; the type check runs only where
``npm install`` has put TypeScript in ``clients/typescript/node_modules``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

import pytest

from tests.support.harness import REPO
from tests.support.http import GATEWAY_TOKEN, HOST_TOKEN, Api

CLIENT = REPO / "clients" / "typescript"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(
    NODE is None,
    reason="node is not installed: the TypeScript client's tests need Node.js 20+ "
    "(node --test); install it to run them",
)


def node_test(*files: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    assert NODE is not None
    return subprocess.run(
        [NODE, "--test", *files],
        cwd=CLIENT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=180,
    )


def assert_node_tests_pass(*files: str, passed: int, env: dict[str, str]) -> None:
    """``node --test files`` in ``env``: every test passes, none is skipped, and ``passed`` of them ran."""
    done = node_test(*files, env=env)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout and "# skipped 0" in done.stdout, done.stdout[-2000:]
    assert f"# pass {passed}" in done.stdout, done.stdout[-2000:]


def tokened_env(url: str) -> dict[str, str]:
    """The TypeScript tests' environment for the API at ``url`` with the test tokens."""
    return {"MEMJOBS_API_URL": url, "MEMJOBS_API_GATEWAY_TOKEN": GATEWAY_TOKEN, "MEMJOBS_API_HOST_TOKEN": HOST_TOKEN}


@needs_node
def test_node_version_is_20_or_newer() -> None:
    assert NODE is not None
    version = subprocess.run([NODE, "--version"], capture_output=True, text=True, check=True).stdout
    assert int(version.strip().lstrip("v").split(".")[0]) >= 20, version


@needs_node
def test_typescript_client_against_the_real_api(api_factory: Callable[..., Api]) -> None:
    api = api_factory(api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    tests = ("test/live.test.mjs", "test/safety.test.mjs", "test/types.test.mjs")
    assert_node_tests_pass(*tests, passed=11, env=tokened_env(api.url))


@needs_node
def test_typescript_client_against_an_open_api(api_factory: Callable[..., Api]) -> None:
    """What `memjobs up` serves on loopback: no token at all."""
    api = api_factory()
    open_env = {"MEMJOBS_API_URL": api.url, "MEMJOBS_API_GATEWAY_TOKEN": "", "MEMJOBS_API_HOST_TOKEN": ""}
    assert_node_tests_pass("test/live.test.mjs", passed=4, env=open_env)


def test_declarations_type_check_with_tsc() -> None:
    tsc = CLIENT / "node_modules" / ".bin" / "tsc"
    if NODE is None or not tsc.exists():
        pytest.skip(
            "TypeScript is not installed: run `npm install` in clients/typescript to type-check "
            "the declarations (the generated types are checked by the node tests regardless)"
        )
    done = subprocess.run([str(tsc), "-p", "."], cwd=CLIENT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
