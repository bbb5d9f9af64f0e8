"""The settings stay split into small sections, every documented variable
still sets the field the code says it does, and a part is handed the sections
it reads, not the whole settings (issue 37)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from memjobs_client.errors import ConfigurationError
from memjobs_worker.settings import Settings, load_settings, setting_keys

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "workers" / "memjobs_worker"
MAX_FIELDS = 25
INVALID = "not-a-valid-value"


def documented() -> set[str]:
    """The variables named in the first column of docs/configuration.md's table."""
    rows = [line for line in (REPO / "docs" / "configuration.md").read_text().splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def test_every_field_of_the_settings_is_a_section_or_the_data_directory() -> None:
    assert set(Settings.model_fields) == {"data_dir", *Settings.SECTIONS}


def test_no_level_of_the_settings_has_more_than_25_fields() -> None:
    sizes = {"Settings": len(Settings.model_fields)}
    sizes.update({name: len(Settings.section_type(name).model_fields) for name in Settings.SECTIONS})
    assert len(sizes) > 10  # the sections were found
    assert {name: size for name, size in sizes.items() if size > MAX_FIELDS} == {}


def test_each_variable_sets_one_field() -> None:
    variables = list(setting_keys().values())
    assert len(variables) == len(set(variables)), sorted(v for v in variables if variables.count(v) > 1)


def test_every_documented_variable_is_a_setting_and_every_setting_documented() -> None:
    known = set(setting_keys().values())
    assert documented() - known == set(), "documented but read by no field"
    assert known - documented() == set(), "read but not documented"


def _probe(annotation: Any) -> str:
    """A value each field's type accepts and its default is not (strings, paths, keys),
    or one it refuses (numbers, switches), to see where the variable lands."""
    text = str(annotation)
    if "SecretStr" in text or "str" in text or "Path" in text:
        return "/probe-value-7731"
    return INVALID


@pytest.mark.parametrize(("key", "variable"), sorted(setting_keys().items()))
def test_the_variable_lands_on_its_field(
    key: str, variable: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The name :func:`setting_keys` derives (prefix and aliases) is the one
    pydantic-settings reads: a value set there shows on the field, or an invalid
    one is refused naming that variable."""
    monkeypatch.setenv("HOME", str(tmp_path))
    if key == "data_dir":
        monkeypatch.setenv(variable, str(tmp_path / "probe"))
        assert load_settings().data_dir == (tmp_path / "probe").resolve()
        return
    section, _, field = key.partition(".")
    probe = _probe(Settings.section_type(section).model_fields[field].annotation)
    monkeypatch.setenv(variable, probe)
    if probe == INVALID:
        with pytest.raises(ConfigurationError, match=variable):
            load_settings()
        return
    value = load_settings().entry(key).value
    shown = value.get_secret_value() if isinstance(value, SecretStr) else str(value)
    assert shown == probe, (key, value)


#: The composition roots: the places (``module:function``, or a class's ``__init__``)
#: that may take the whole :class:`Settings`, each with why. Every other function
#: under workers/memjobs_worker is handed the sections (or values) it reads.
#: The CLI's commands, ``(settings: Settings, args: argparse.Namespace)``, are roots too.
ROOTS = {
    "runtime.py:open_door": "wires a door's Runtime",
    "runtime.py:Runtime.__init__": "a process's parts: each feature's built from its own sections",
    "supervisor.py:Stack.__init__": "memjobs up: the embedded servers, the workers, the runtime, the state file",
    "endpoints.py:stack_settings": "records the shared switches of seven sections in the state file",
    "http/serve.py:ApiServer.__init__": "the API's composition root (create_app), its section checked first",
    "http/app.py:create_app": "the API's composition root: builds the ApiContext",
    "http/context.py:ApiContext.__init__": "opens the door's Runtime; the routes see only the api section",
    "ops/backup.py:backup": "records every setting (secrets left out) in the archive",
    "ops/backup.py:settings_without_secrets": "serialises every setting",
    "ops/backup.py:restore": "compares every recorded setting with this host's",
    "ops/backup.py:_compare_settings": "compares every recorded setting with this host's",
    "cli/door.py:runtime_for": "a CLI command's door: its Runtime",
    "cli/door.py:producer_for": "a CLI command's door: the endpoints and the producer client (five sections)",
    "cli/dead_commands.py:dead_letters": "a CLI command's door: its Runtime",
    "cli/stack_view.py:follow_stack": "puts the running stack's switches, of any section, in place of the shell's",
    "cli/demo.py:run_demo": "memjobs demo: starts a Stack when none runs",
    "cli/demo.py:_scenario": "memjobs demo: its producer client and Runtime",
    "cli/api_command.py:start_beside_stack": "starts the API (its composition root) beside the stack",
}


def _names_settings(annotation: ast.expr | None) -> bool:
    """Whether an annotation names the whole Settings (alone, in a union, a Callable, a string)."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return _names_settings(ast.parse(annotation.value, mode="eval").body)
    return any(
        (isinstance(node, ast.Name) and node.id == "Settings")
        or (isinstance(node, ast.Attribute) and node.attr == "Settings")
        or (isinstance(node, ast.Constant) and node.value == "Settings")
        for node in ast.walk(annotation)
    )


def _is_command(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A CLI command's entry point: ``(settings: Settings, args: argparse.Namespace)``."""
    shape = [ast.unparse(a.annotation) if a.annotation else None for a in function.args.args]
    return shape == ["Settings", "argparse.Namespace"]


def takers_of_settings(root: Path) -> dict[str, str]:
    """``module:qualified name`` of each function under ``root`` with a parameter
    annotated with the whole Settings (the CLI commands left out), and the parameter."""
    found: dict[str, str] = {}

    def visit(node: ast.AST, module: str, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, module, f"{scope}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = child.args
                every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
                every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
                taking = [a.arg for a in every if _names_settings(a.annotation)]
                if taking and not (module.startswith("cli/") and _is_command(child)):
                    found[f"{module}:{scope}{child.name}"] = taking[0]
                visit(child, module, f"{scope}{child.name}.")

    for path in sorted(root.rglob("*.py")):
        visit(ast.parse(path.read_text(encoding="utf-8")), path.relative_to(root).as_posix(), "")
    return found


def test_the_guard_finds_a_part_taking_the_whole_settings(tmp_path: Path) -> None:
    (tmp_path / "cli").mkdir()
    (tmp_path / "part.py").write_text(
        "def build(redis: RedisSettings) -> None: ...\n"
        "def wide(x: int, *, settings: Settings | None = None) -> None: ...\n"
        "class Part:\n    def __init__(self, make: Callable[[], 'Settings']) -> None: ...\n"
    )
    (tmp_path / "cli" / "commands.py").write_text(
        "def status(settings: Settings, args: argparse.Namespace) -> int: ...\n"
        "def helper(settings: Settings) -> None: ...\n"
    )
    assert takers_of_settings(tmp_path) == {
        "part.py:wide": "settings",
        "part.py:Part.__init__": "make",
        "cli/commands.py:helper": "settings",
    }


def test_only_the_composition_roots_take_the_whole_settings() -> None:
    """A part is handed the sections it reads (``redis: RedisSettings``), so that
    what it depends on shows in its signature; a new root is added to ROOTS with why."""
    takers = takers_of_settings(WORKER)
    assert set(takers) - set(ROOTS) == set(), "takes the whole Settings: hand it the sections it reads"
    assert set(ROOTS) - set(takers) == set(), "a root that no longer takes Settings: drop it from ROOTS"
