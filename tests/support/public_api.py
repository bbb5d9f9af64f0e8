"""Checks of a package's public surface: where its names come from, and what importing it loads."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from types import ModuleType

from tests.support.harness import REPO


def names_of(homes: dict[str, str]) -> set[str]:
    """The names of a package's ``homes``: each home module's names, separated by white space."""
    return {name for names in homes.values() for name in names.split()}


def assert_exported_from_homes(package: ModuleType, homes: dict[str, str]) -> None:
    """Each name of ``homes`` (as :func:`names_of` reads them) is, on ``package``, the very
    object its home module ``package.<home>`` defines."""
    for home, names in homes.items():
        module = importlib.import_module(f"{package.__name__}.{home}")
        strays = [name for name in names.split() if getattr(package, name) is not getattr(module, name)]
        assert strays == [], f"not the objects of {module.__name__}: {strays}"


def modules_loaded_by_importing(module: str) -> list[str]:
    """The names in ``sys.modules`` after a fresh interpreter imports ``module`` (from this checkout)."""
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
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
    loaded: list[str] = json.loads(done.stdout)
    return loaded
