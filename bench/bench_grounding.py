"""Grounding figures: how many inferred patches the rule refuses (must be all)
and how many grounded ones it refuses by mistake (at most 5 %), by language.

    python bench/bench_grounding.py [tests/data/grounding_cases.jsonl]
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.grounding_eval import load, score  # noqa: E402


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "tests" / "data" / "grounding_cases.jsonl"
    result = score(load(path))
    print(f"{'set':<10}{'grounded':>10}{'refused':>10}{'inferred':>10}{'refused':>10}")
    for lang in ("zh", "en", None):
        print(
            f"{lang or 'all':<10}{result.count('grounded', lang):>10}"
            f"{result.rate('grounded', lang):>10.1%}{result.count('inferred', lang):>10}"
            f"{result.rate('inferred', lang):>10.1%}"
        )
    for case in result.wrong:
        print("wrong:", case["label"], case["reason"], case["text"], "|", case["evidence"])


if __name__ == "__main__":
    main()
