"""A CLI that starts in a blink: each command imports only what it runs.

Guarded without a clock: each command runs in a fresh interpreter (as a user
runs it) against servers that refuse the connection at once, and the modules
it imported are listed. ``memjobs --help`` imports none of the worker, not
even the producer client; the producer commands import the producer client
and the settings, never the worker's heavy parts. The figures are
``bench/bench_cli_startup.py``'s (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memjobs_worker.cli import exits
from tests.support.cli import cli_env
from tests.support.harness import REPO

#: What a producer command must not pay for: the model client, mem0, the
#: database stack, the HTTP API, the metrics library, the worker's own wiring.
HEAVY = (
    "openai",
    "mem0",
    "sqlalchemy",
    "psycopg",
    "alembic",
    "fastapi",
    "starlette",
    "uvicorn",
    "jinja2",
    "prometheus_client",
    "tenacity",
    "mcp",
    "memjobs_worker.runtime",
    "memjobs_worker.actors",
    "memjobs_worker.broker",
    "memjobs_worker.app",
    "memjobs_worker.supervisor",
    "memjobs_worker.memory",
    "memjobs_worker.knowledge",
    "memjobs_worker.sessions",
    "memjobs_worker.http",
    "memjobs_worker.ops",
)

PROBE = """
import json, sys
from memjobs_worker.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""

UNREACHABLE = {
    "MEMJOBS_REDIS_URL": "redis://127.0.0.1:1/0",
    "MEMJOBS_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/postgres",
}


def imported(tmp_path: Path, *args: str) -> tuple[int, set[str]]:
    """Run ``memjobs ARGS`` in a fresh interpreter: its exit code and every module it imported."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=REPO,
        env=cli_env(tmp_path / "data", **UNREACHABLE),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return int(report["code"] or 0), set(report["modules"])


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_help_imports_no_command_and_not_the_producer_client(tmp_path: Path) -> None:
    code, modules = imported(tmp_path, "--help")
    assert code == exits.OK
    assert heavy(modules) == []
    assert not {"memjobs_client", "dramatiq", "redis", "pydantic"} & modules
    loaded = sorted(m for m in modules if m.startswith("memjobs_worker."))
    # memjobs_worker.lazy: the package's own __getattr__ (stdlib imports only)
    assert loaded == [
        "memjobs_worker.cli",
        "memjobs_worker.cli.exits",
        "memjobs_worker.cli.main",
        "memjobs_worker.lazy",
    ]


def test_a_command_help_imports_only_that_command(tmp_path: Path) -> None:
    code, modules = imported(tmp_path, "remember", "--help")
    assert code == exits.OK
    assert heavy(modules) == []
    assert "memjobs_worker.cli.knowledge_commands" not in modules


@pytest.mark.parametrize(
    "args",
    [
        ("remember", "--owner", "a", "--text", "I drink green tea every morning"),
        ("task", "--owner", "a", "--task", "t1", "--goal", "water the plants", "--status", "running"),
        ("end-session", "--owner", "a", "--session", "s1", "--transcript", "TRANSCRIPT"),
    ],
    ids=lambda args: args[0],
)
def test_a_producer_command_imports_the_producer_client_and_nothing_heavy(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    transcript = tmp_path / "transcript.json"
    transcript.write_text(json.dumps([{"role": "user", "text": "hello", "ts": 1.0}]))
    code, modules = imported(tmp_path, *(str(transcript) if a == "TRANSCRIPT" else a for a in args))
    assert code == exits.UNAVAILABLE, "it went as far as sending to Redis"
    assert "memjobs_client.client" in modules
    assert heavy(modules) == []


def test_forget_opens_the_ledger_and_nothing_more(tmp_path: Path) -> None:
    """``forget`` decides at once on the ledger: the database stack (SQLAlchemy,
    psycopg, the migrations' check), the pipeline's metrics, and no model client,
    mem0, session jobs, knowledge or HTTP stack."""
    code, modules = imported(tmp_path, "forget", "--owner", "a", "--source", "src_" + "0" * 32)
    assert code == exits.UNAVAILABLE, "it went as far as asking the state database"
    allowed = (
        "sqlalchemy",
        "psycopg",
        "alembic",
        "prometheus_client",
        "memjobs_worker.runtime",
        "memjobs_worker.memory",
        "memjobs_worker.ops",
    )
    assert [m for m in heavy(modules) if not any(m == a or m.startswith(a + ".") for a in allowed)] == []
    assert "memjobs_worker.model_client" not in modules and "memjobs_worker.sessions" not in modules


def test_the_migrations_schema_loads_no_model_client() -> None:
    """Every door migrates on first use of the database (Alembic's env imports
    the schema): the tables of every feature, and not the model client."""
    done = subprocess.run(
        [sys.executable, "-c", "import json, sys, memjobs_worker.schema; print(json.dumps(sorted(sys.modules)))"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    modules = set(json.loads(done.stdout))
    assert not {"openai", "mem0", "memjobs_worker.model_client", "fastapi"} & modules
