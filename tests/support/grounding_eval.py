"""Measure the grounding rule on a labelled set of patches (a JSON Lines file).

Each line: ``{"lang", "doc", "text", "evidence", "user_turns", "label"}`` with
``label`` ``grounded`` or ``inferred`` and, for a deletion, ``"delete": true``.
Used by ``tests/sessions/test_grounding.py`` (the thresholds) and
``bench/bench_grounding.py`` (the figures in docs/benchmarks.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memjobs_worker.sessions.grounding import grounded


@dataclass
class Score:
    """Refusals per (language, label), and the cases judged wrongly."""

    total: dict[tuple[str, str], int] = field(default_factory=dict)
    refused: dict[tuple[str, str], int] = field(default_factory=dict)
    wrong: list[dict[str, Any]] = field(default_factory=list)

    def rate(self, label: str, lang: str | None = None) -> float:
        """Share of the ``label`` cases (of one language, or all) that were refused."""
        keys = [k for k in self.total if k[1] == label and (lang is None or k[0] == lang)]
        total = sum(self.total[k] for k in keys)
        return sum(self.refused.get(k, 0) for k in keys) / total if total else 0.0

    def count(self, label: str, lang: str | None = None) -> int:
        return sum(n for (la, lb), n in self.total.items() if lb == label and (lang is None or la == lang))


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def score(cases: list[dict[str, Any]]) -> Score:
    out = Score()
    for case in cases:
        reason = grounded(
            case["doc"], case["text"], case["evidence"], case["user_turns"], deletion=bool(case.get("delete"))
        )
        key = (case["lang"], case["label"])
        out.total[key] = out.total.get(key, 0) + 1
        if reason is not None:
            out.refused[key] = out.refused.get(key, 0) + 1
        if (reason is None) != (case["label"] == "grounded"):
            out.wrong.append({**case, "reason": reason})
    return out
