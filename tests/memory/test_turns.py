"""What a remembered turn of conversation says about itself (who said it, when) and
what a question names (a speaker, dates): ``memory.engine.turns``, which recall's
ranking uses to put the named person's turns and the named dates first."""

from __future__ import annotations

import datetime as dt

import pytest

from memjobs_worker.memory.engine.turns import date_spans, named_speaker, speaker_of, stamp_of


@pytest.mark.parametrize(
    ("text", "speaker"),
    [
        ("[1:56 pm on 8 May, 2023] Caroline: I went to a support group yesterday.", "Caroline"),
        ("Mary Ann: see you tomorrow", "Mary Ann"),
        ("[2023-05-08] 小明：我对花生过敏", "小明"),
        ("I love it: the colours, the light", None),  # a sentence with a colon is not a turn
        ("我对花生过敏", None),
        ("https://example.org/a: link", None),
        ("My wifi password is in the drawer", None),
    ],
)
def test_the_speaker_of_a_line_of_a_transcript(text: str, speaker: str | None) -> None:
    assert speaker_of(text) == speaker


def test_the_stamp_of_a_memory_is_the_day_in_its_leading_brackets() -> None:
    assert stamp_of("[1:56 pm on 8 May, 2023] Caroline: hi") == dt.date(2023, 5, 8)
    assert stamp_of("[2023年5月8日] 小明：你好") == dt.date(2023, 5, 8)
    assert stamp_of("[May 2023] Caroline: a month is not a day") is None
    assert stamp_of("Caroline went there on 8 May 2023") is None  # not a stamp


def test_dates_a_question_names_are_spans_of_days() -> None:
    day, month, year = dt.date(2022, 5, 1), (dt.date(2022, 9, 1), dt.date(2022, 9, 30)), dt.date(2021, 12, 31)
    assert date_spans("What did Joanna watch on 1 May, 2022?") == [(day, day)]
    assert date_spans("on May 1st, 2022") == [(day, day)]
    assert date_spans("on 2022-05-01") == [(day, day)]
    assert date_spans("2022年5月1日看了什么电影？") == [(day, day)]
    assert date_spans("Where did Nate go in Sept 2022?") == [month]
    assert date_spans("2022年9月去了哪里？") == [month]
    assert date_spans("What happened in 2021?") == [(dt.date(2021, 1, 1), year)]
    assert date_spans("What is 12345 plus 7?") == []
    assert date_spans("on 30 February 2023") == [(dt.date(2023, 2, 1), dt.date(2023, 2, 28))]  # no such day


def test_the_speaker_a_question_names_first() -> None:
    speakers = {"Caroline", "Melanie", "Will", "小明"}
    assert named_speaker("What did Caroline tell Melanie?", speakers) == "Caroline"
    assert named_speaker("What did Melanie tell Caroline?", speakers) == "Melanie"
    assert named_speaker("小明对什么过敏？", speakers) == "小明"
    assert named_speaker("will it rain tomorrow?", speakers) is None  # a name is matched as written
    assert named_speaker("What did Carolines say?", speakers) is None  # a whole word
