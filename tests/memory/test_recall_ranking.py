"""Recall's ranking on its own (issue 32), without a server: what a score means,
what the neighbours add, and the floor. ``rank_memories`` takes what the recall
SQL returns (every memory of the owner with its cosine, in the order made; the
weight of each question token each holds; the question's whole weight), so it is tested on
such inputs here and end to end in ``test_recall_quality.py``."""

from __future__ import annotations

import pytest

from memjobs_worker.memory.engine.fused_search import FLOOR, rank_memories

MIN_SCORE = 0.1


def ids(ranked: list[tuple[str, float]]) -> list[str]:
    return [memory_id for memory_id, _ in ranked]


def spread(named: dict[str, float]) -> list[tuple[str, float]]:
    """Memories in the order given, with a dozen ordinary ones after them (the owner's average)."""
    return [*named.items(), *((f"other{i}", 0.3) for i in range(12))]


def test_a_memory_that_is_the_question_reads_one_and_scores_stay_in_0_1() -> None:
    memories = spread({"exact": 1.0, "near": 0.6})
    ranked = rank_memories(memories, {"exact": (4.0,)}, 4.0, MIN_SCORE)
    assert ids(ranked)[:2] == ["exact", "near"]
    assert ranked[0][1] == pytest.approx(1.0)
    assert all(0.0 < score <= 1.0 for _, score in ranked)


def test_the_turn_beside_the_topic_comes_before_an_equally_near_memory_elsewhere() -> None:
    # "Have you been painting?" / "Yes, that sunrise last year": the answer alone
    # is no nearer to "what did Melanie paint?" than an unrelated turn far away.
    memories = [("topic", 0.8), ("answer", 0.55), *((f"other{i}", 0.3) for i in range(12)), ("alone", 0.55)]
    assert ids(rank_memories(memories, {}, 0.0, MIN_SCORE))[:3] == ["topic", "answer", "alone"]


def test_a_memory_unrelated_to_the_question_is_not_lifted_by_its_neighbour() -> None:
    # A fact remembered beside the answer (no nearer than the owner's average) is not the answer.
    memories = spread({"wifi": 0.3, "allergy": 0.9, "peanuts": 0.45})
    ranked = ids(rank_memories(memories, {}, 0.0, MIN_SCORE))
    assert ranked[:2] == ["allergy", "peanuts"]
    assert "wifi" not in ranked


def test_memories_no_nearer_than_the_rest_and_without_keywords_stay_under_the_floor() -> None:
    memories = [(f"m{i}", 0.2 + 0.001 * (i % 3)) for i in range(20)]
    assert rank_memories(memories, {}, 0.0, MIN_SCORE) == []
    assert rank_memories([], {}, 0.0, MIN_SCORE) == []
    assert FLOOR > 0


def test_a_keyword_match_counts_even_when_the_vector_is_not_near() -> None:
    # "Corolla" or "馒头": the keyword finds the memory the embedding blurs.
    memories = spread({"car": 0.25, "near": 0.5})  # the car: less near than the owner's average memory
    assert ids(rank_memories(memories, {"car": (2.0,)}, 2.0, MIN_SCORE))[0] == "car"
    assert "car" not in ids(rank_memories(memories, {}, 2.0, MIN_SCORE))


def test_a_turn_holds_the_keywords_of_the_turns_it_answers() -> None:
    # "What did Melanie paint?": "Have you been painting?" holds the keyword, the answer
    # "Yes, that sunrise last year" does not, and is no nearer than a turn far away that
    # holds half the question's weight. Read with the turn it answers, it holds it all.
    memories = [("asked", 0.45), ("answer", 0.5), *((f"other{i}", 0.3) for i in range(12)), ("elsewhere", 0.5)]
    texts = ["[8 May 2023] Caroline: Have you been painting?", "[8 May 2023] Melanie: Yes, that sunrise last year."]
    texts += ["[8 May 2023] Caroline: ok"] * 12 + ["[9 May 2023] Melanie: I saw a painting of a bird."]
    keyword = {"asked": (2.0, 0.0), "elsewhere": (0.0, 1.0)}

    def ranked(memories: list[tuple[str, float]], texts: list[str] | None) -> list[str]:
        return ids(rank_memories(memories, keyword, 2.0, MIN_SCORE, neighbour_weight=0.0, texts=texts))

    assert ranked(memories, texts).index("answer") < ranked(memories, texts).index("elsewhere")
    # Only the turns made before count: a question does not answer the turn after it.
    assert ranked(memories[::-1], texts[::-1]).index("elsewhere") < ranked(memories[::-1], texts[::-1]).index("answer")
    # Memories that are not lines of a transcript (remembered facts) are read alone.
    facts = ["I paint.", "I liked that sunrise.", *(["ok"] * 12), "A bird."]
    assert ranked(memories, facts).index("elsewhere") < ranked(memories, facts).index("answer")
    assert ranked(memories, None).index("elsewhere") < ranked(memories, None).index("answer")


def test_what_the_named_person_said_comes_before_what_the_other_said() -> None:
    # "What did Caroline research?": Melanie's turn is as near as Caroline's, and names her too.
    memories = spread({"melanie": 0.6, "caroline": 0.6})
    texts = ["[8 May 2023] Melanie: Caroline, how is the research going?", "[8 May 2023] Caroline: Adoption agencies."]
    texts += ["[8 May 2023] Melanie: ok"] * 12
    plain = ids(rank_memories(memories, {}, 0.0, MIN_SCORE))
    assert plain[:2] == ["melanie", "caroline"]  # equal scores: the order made
    asked = rank_memories(memories, {}, 0.0, MIN_SCORE, question="What did Caroline research?", texts=texts)
    assert ids(asked)[:2] == ["caroline", "melanie"]
    assert all(0.0 < score <= 1.0 for _, score in asked)


def test_a_memory_stamped_on_the_day_the_question_names_comes_first() -> None:
    memories = spread({"march": 0.6, "may": 0.6})
    texts = ["[1 March, 2022] Joanna: I watched a film.", "[2 May, 2022] Joanna: I watched a film last night."]
    texts += ["[1 March, 2022] Nate: ok"] * 12
    # The question names the day before the stamp: a turn tells of "last night" the next day.
    asked = rank_memories(memories, {}, 0.0, MIN_SCORE, question="What did Joanna watch on 1 May, 2022?", texts=texts)
    assert ids(asked)[0] == "may"
    for question in ("What did Joanna watch in May 2022?", "What did Joanna watch on 2022-05-02?"):
        assert ids(rank_memories(memories, {}, 0.0, MIN_SCORE, question=question, texts=texts))[0] == "may"
    # A date no memory was stamped on changes nothing: the order made.
    assert ids(rank_memories(memories, {}, 0.0, MIN_SCORE, question="In 2021?", texts=texts))[0] == "march"


def test_the_named_speaker_does_not_lift_a_memory_unrelated_to_the_question() -> None:
    memories = [(f"m{i}", 0.2 + 0.001 * (i % 3)) for i in range(20)]
    texts = [f"[8 May 2023] Caroline: line {i}" for i in range(20)]
    assert (
        rank_memories(memories, {}, 0.0, MIN_SCORE, question="What did Caroline say on 8 May 2023?", texts=texts) == []
    )
