"""Printing: one JSON document with ``--json``, short lines for people otherwise."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any


def emit(document: Any, *, as_json: bool, columns: Sequence[str] | None = None) -> None:
    if as_json:
        print(json.dumps(document, ensure_ascii=False, default=str))
        return
    if isinstance(document, list) and columns:
        for row in document:
            print("  ".join(_cell(row.get(c)) for c in columns))
        if not document:
            print("(none)")
        return
    if isinstance(document, dict):
        for key, value in document.items():
            shown = json.dumps(value, ensure_ascii=False, default=str) if isinstance(value, dict | list) else value
            print(f"{key}: {shown}")
        return
    print(document)


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:.3f}"
    return "-" if value is None else str(value)


def error(message: str) -> None:
    print(f"memjobs: {message}", file=sys.stderr)
