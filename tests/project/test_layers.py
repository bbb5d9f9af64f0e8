"""The layers of docs/DESIGN.md hold: import-linter checks the contracts in
pyproject.toml (``[tool.importlinter]``), so an import that points up a layer,
or between two features, fails the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.harness import REPO


def test_every_import_points_down_a_layer() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--config", "pyproject.toml", "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout, result.stdout
