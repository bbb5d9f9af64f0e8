"""The code stays typed (mypy --strict on producers/, workers/, tests/ and bench/), lint-clean, formatted."""

from __future__ import annotations

import subprocess
import sys

from tests.support.harness import REPO


def test_mypy_strict_passes() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]


def test_ruff_passes() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "producers", "workers", "tests", "bench"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]


def test_ruff_format_leaves_the_tree_as_it_is() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "producers", "workers", "tests", "bench"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, "run `make format`:\n" + result.stdout[-3000:]
