"""The README's promises that can be checked without running anything: every
setting in its configuration table, and no pointer outside the repository."""

from __future__ import annotations

import re

from memjobs_worker.settings import Settings
from tests.support.harness import REPO


def _section(title: str) -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def env_names() -> dict[str, str]:
    names = {}
    for field, info in Settings.model_fields.items():
        alias = info.validation_alias
        choices = getattr(alias, "choices", None)
        names[field] = str(choices[0]) if choices else f"MEMJOBS_{field.upper()}"
    return names


def test_every_setting_is_in_the_configuration_table() -> None:
    rows = [line for line in _section("Configuration").splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}
    missing = sorted(env for env in env_names().values() if env not in documented)
    assert missing == [], f"settings missing from README's configuration table: {missing}"


def test_the_design_document_is_in_the_repository() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert "../shared" not in text
    assert "docs/DESIGN.md" in text and (REPO / "docs" / "DESIGN.md").exists()
