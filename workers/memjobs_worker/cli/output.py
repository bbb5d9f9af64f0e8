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


def say(line: str, *, err: bool = False) -> None:
    """Print a line for the person at the terminal; a terminal that is gone
    (``memjobs up`` after SIGHUP) is not an error."""
    try:
        print(line, file=sys.stderr if err else sys.stdout, flush=True)
    except OSError:
        pass


def status_table(document: dict[str, Any]) -> str:
    """``memjobs status`` for people: a table of queues, then the ledger, the
    workers and the recent outcomes."""
    columns = ["ready", "delayed", "in_flight", "dead"]
    queues = document["queues"]
    width = max([len("queue")] + [len(name) for name in queues])
    lines = ["queue".ljust(width) + "".join(c.rjust(11) for c in columns)]
    for name, counts in queues.items():
        lines.append(name.ljust(width) + "".join(str(counts.get(c, 0)).rjust(11) for c in columns))
    sources = ", ".join(f"{state} {count}" for state, count in document["sources"].items())
    lines += ["", f"sources: {sources}", f"live workers: {document['workers']}"]
    for window, outcomes in document.get("recent", {}).items():
        shown = _outcomes(outcomes)
        lines.append(f"{window.replace('_', ' ')}: {shown or 'no jobs'}")
    return "\n".join(lines)


def _outcomes(outcomes: Any) -> str:
    if not isinstance(outcomes, dict):
        return str(outcomes)
    parts = []
    for actor, counts in sorted(outcomes.items()):
        if isinstance(counts, dict):
            inner = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            parts.append(f"{actor} ({inner})")
        else:
            parts.append(f"{actor} {counts}")
    return "; ".join(parts)
