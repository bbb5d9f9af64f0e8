"""Printing: one JSON document with ``--json``; for people, aligned tables and
``name: value`` lines with no Python in them (no ``None``, ``[]``, ``{}``, no
class names). Tables measure what a terminal shows, not characters: a CJK
character or an emoji takes two columns (:func:`width`)."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from wcwidth import wcswidth, wcwidth

#: Model names in the producer client's refusals, and the fields it names, as
#: a person at the command line knows them: by the option that sets the field,
#: which is its name less any ``_id`` or ``_key`` (``session_id`` is ``--session``).
_MODEL_PREFIX = re.compile(r"^invalid (?:[A-Z][A-Za-z]+|payload): ")
_OPTIONS = {
    field: "--" + re.sub(r"_(?:id|key)$", "", field)
    for field in ("owner_id", "owner_key", "session_id", "source_id", "task_id")
    + ("text", "goal", "status", "transcript", "tasks", "kind", "query")
}
_FIELD = re.compile(r"^([a-z_]+)(?:\.[\w.]+)?: ")
MAX_CELL = 60


def for_people(message: str) -> str:
    """A refusal's message without the payload model's class name, its field
    named as the option that set it (``invalid RememberSource: text: …`` →
    ``--text: …``)."""
    shown = _MODEL_PREFIX.sub("", message, count=1)
    field = _FIELD.match(shown)
    if field is not None and field.group(1) in _OPTIONS:
        shown = _OPTIONS[field.group(1)] + shown[len(field.group(1)) :]
    return shown


def emit(document: Any, *, as_json: bool, columns: Sequence[str] | None = None, empty: str = "(none)") -> None:
    if as_json:
        print(json.dumps(document, ensure_ascii=False, default=str))
        return
    if isinstance(document, list) and columns:
        print(table(document, columns) if document else empty)
        return
    if isinstance(document, dict):
        for key, value in document.items():
            if value is None or value == [] or value == {}:
                continue  # nothing to say: no "source_id: None", no "skipped: []"
            print(f"{key}: {_value(value)}")
        return
    print(document)


def width(text: str) -> int:
    """Columns ``text`` takes on a terminal (CJK and emoji: two; combining marks: none)."""
    shown = wcswidth(text)
    if shown >= 0:
        return int(shown)
    return sum(max(wcwidth(ch), 0) for ch in text)  # a control character counts as nothing


def pad(text: str, columns: int, *, right: bool = False) -> str:
    """``text`` padded with spaces to ``columns`` terminal columns (on the left with ``right``)."""
    fill = " " * max(columns - width(text), 0)
    return fill + text if right else text + fill


def cut(text: str, columns: int) -> str:
    """``text`` cut to at most ``columns`` terminal columns, ``…`` marking the cut."""
    if width(text) <= columns:
        return text
    kept, used = [], 0
    for ch in text:
        w = max(wcwidth(ch), 0)
        if used + w > columns - 1:
            break
        kept.append(ch)
        used += w
    return "".join(kept) + "…"


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str], headers: Sequence[str] | None = None) -> str:
    """Rows under a header, columns aligned by display width; long cells cut to
    :data:`MAX_CELL` columns (``--json`` has them whole)."""
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    header = list(headers or columns)
    widths = [max(width(h), *(width(r[i]) for r in cells)) for i, h in enumerate(header)]
    return "\n".join(
        "  ".join(pad(v, w) for v, w in zip(line, widths, strict=True)).rstrip() for line in [header, *cells]
    )


def _cell(value: Any) -> str:
    if isinstance(value, list):
        shown = ",".join(str(v) for v in value) or "-"
    elif isinstance(value, float):
        shown = f"{value:.3f}"
    elif value is None or value == "":
        shown = "-"
    else:
        shown = str(value)
    return cut(" ".join(shown.split()), MAX_CELL)  # one line per row


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "; ".join(_value(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
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
    first = max([width("queue")] + [width(name) for name in queues])
    lines = [pad("queue", first) + "".join(c.rjust(11) for c in columns)]
    for name, counts in queues.items():
        lines.append(pad(name, first) + "".join(str(counts.get(c, 0)).rjust(11) for c in columns))
    sources = ", ".join(f"{state} {count}" for state, count in document["sources"].items())
    lines += ["", f"sources: {sources}", f"live workers: {document['workers']}"]
    for service, breaker in document.get("model_breakers", {}).items():
        if breaker["state"] == "open":
            lines.append(
                f"model {service}: circuit OPEN for {breaker['open_for_s']} s: "
                "model work waits, one probe call every few seconds"
            )
        else:
            lines.append(f"model {service}: circuit closed ({breaker['failures']} recent failures)")
    if restarted := document.get("embedded_postgres"):
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(restarted["last_restarted_at"] or 0))
        lines.append(f"embedded PostgreSQL: died and restarted {restarted['restarts']} time(s), last at {at}")
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
