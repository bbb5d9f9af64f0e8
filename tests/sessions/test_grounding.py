"""The grounding rule of consolidation, measured on a labelled set of patches
(tests/data/grounding_cases.jsonl: Chinese and English, grounded and inferred)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memjobs_worker.sessions.grounding import grounded
from tests.support.grounding_eval import load, score

CASES = load(Path(__file__).parent.parent / "data" / "grounding_cases.jsonl")


def test_the_labelled_set_is_large_enough_in_both_languages() -> None:
    result = score(CASES)
    for lang in ("zh", "en"):
        assert result.count("grounded", lang) >= 30 and result.count("inferred", lang) >= 30
    assert result.count("grounded") >= 60 and result.count("inferred") >= 60


def test_every_inferred_patch_is_refused_and_at_most_5_percent_of_grounded_ones() -> None:
    result = score(CASES)
    assert result.rate("inferred") == 1.0, [c for c in result.wrong if c["label"] == "inferred"]
    assert result.rate("grounded") <= 0.05, [c for c in result.wrong if c["label"] == "grounded"]


@pytest.mark.parametrize(
    ("doc", "text", "evidence", "turns"),
    [
        # the issue's two examples
        ("USER.md", "- 称呼：老王", "好的", ["好的"]),
        ("MEMORY.md", "- 用户喜欢南方城市，可能单身", "我住在杭州", ["我住在杭州"]),
        # a quote from nobody, or of words the user did not say in one turn
        ("MEMORY.md", "- Lives in Hangzhou", "I live in Hangzhou", ["I work in Hangzhou"]),
        ("MEMORY.md", "- Lives in Hangzhou", None, ["I live in Hangzhou"]),
        # a reply preference the user stated but did not ask for
        ("USER.md", "- Keep answers short", "short answers are common", ["short answers are common"]),
        # a deletion nobody asked for
        ("MEMORY.md", "", "I was in Hangzhou", ["I was in Hangzhou"]),
    ],
)
def test_issue_examples_are_refused(doc: str, text: str, evidence: str | None, turns: list[str]) -> None:
    assert grounded(doc, text, evidence, turns, deletion=not text) is not None


def test_the_assistants_words_are_not_evidence() -> None:
    # Only user turns are passed as evidence sources: the assistant's "Sure, Xiao Lin" is not one.
    assert grounded("USER.md", "- Call the user Xiao Lin", "Sure, Xiao Lin", ["What's the weather?"]) == "not_grounded"
