"""The Dockerfile, checked without building it (no container engine runs here):
its runtime user, the data directory that user owns, its environment and its
entry point, against the settings and the package the repository defines."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from memjobs_worker.cli.main import build_parser
from memjobs_worker.pools import worker_command
from memjobs_worker.settings import setting_keys
from tests.support.harness import REPO


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def env_of(pairs: list[tuple[str, str]]) -> dict[str, str]:
    env = {}
    for word, rest in pairs:
        if word == "ENV":
            for item in shlex.split(rest):
                name, _, value = item.partition("=")
                env[name] = value
    return env


def test_the_image_runs_as_an_unprivileged_user_that_owns_the_data_directory() -> None:
    pairs = instructions()
    users = [rest for word, rest in pairs if word == "USER"]
    assert users and users[-1] not in ("root", "0"), users
    user = users[-1]
    data_dir = env_of(pairs).get("MEMJOBS_DATA_DIR")
    assert data_dir, "MEMJOBS_DATA_DIR is not set in the image"
    assert "data_dir" in setting_keys()
    runs = " ".join(rest for word, rest in pairs if word == "RUN")
    created = re.search(rf"install -d -o {user} -g {user} -m (0?700) {re.escape(data_dir)}(\s|$)", runs) or re.search(
        rf"mkdir -p {re.escape(data_dir)}.*chown {user}(:{user})? {re.escape(data_dir)}", runs
    )
    assert created, f"{data_dir} is neither created nor given to {user}: {runs}"
    assert re.search(rf"useradd[^&]*\b{user}\b", runs), f"user {user} is not created"
    # The user is switched to after the install steps (they need root).
    last_run = max(i for i, (word, _) in enumerate(pairs) if word == "RUN")
    assert max(i for i, (word, _) in enumerate(pairs) if word == "USER") > last_run


def test_every_env_name_is_a_setting() -> None:
    known = set(setting_keys().values())
    for name in env_of(instructions()):
        assert name in known, f"{name} in the Dockerfile is not a setting"


def test_the_entry_point_is_the_memjobs_worker_command() -> None:
    cmds = [rest for word, rest in instructions() if word in ("CMD", "ENTRYPOINT")]
    assert cmds
    command = json.loads(cmds[-1])  # exec form: no shell between the signal and the process
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert command[0] in scripts, f"{command[0]} is not a console script of the package"
    module, _, function = scripts[command[0]].partition(":")
    assert callable(getattr(importlib.import_module(module), function))
    args = build_parser().parse_args(command[1:])
    assert args.command == "worker"
    # ... which runs the workers' entry module, memjobs_worker (python -m memjobs_worker).
    assert worker_command(1, 1)[1:3] == ["-m", "memjobs_worker"]
    assert importlib.util.find_spec("memjobs_worker.__main__") is not None


@pytest.mark.parametrize("source", ["producers", "workers", "pyproject.toml", "README.md"])
def test_what_the_image_copies_exists(source: str) -> None:
    copies = " ".join(rest for word, rest in instructions() if word == "COPY")
    assert source in copies
    assert Path(REPO / source).exists()
