"""The settings stay split into small sections, and every documented variable
still sets the field the code says it does (issue 37)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from memjobs_client.errors import ConfigurationError
from memjobs_worker.settings import Settings, load_settings, setting_keys

REPO = Path(__file__).resolve().parents[2]
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
