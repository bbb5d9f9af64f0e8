"""The labelled sensitive-content corpus (``tests/corpus/``): credential lines
with their family and secret, and ordinary lines that must pass."""

from __future__ import annotations

from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "corpus"


def _lines(name: str) -> list[str]:
    text = (CORPUS / name).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def positives() -> list[tuple[str, str, str]]:
    """(family, secret, text) per credential line; ``\\n`` in the file is a line break."""
    rows = []
    for line in _lines("sensitive_positive.txt"):
        family, secret, text = line.split("\t")
        rows.append((family, secret.replace("\\n", "\n"), text.replace("\\n", "\n")))
    return rows


def negatives() -> list[str]:
    return _lines("sensitive_negative.txt")
