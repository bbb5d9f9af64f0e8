"""What a remembered turn of conversation says about itself: who said it and when.

What: a memory shaped like a line of a transcript, ``"[8 May 2023] Caroline: I went
to a support group yesterday"`` (the date in brackets optional, ``:`` or ``：``),
has a speaker (:func:`speaker_of`) and a date (:func:`stamp_of`); a question may
name one of the speakers (:func:`named_speaker`) and dates (:func:`date_spans`:
a day, a month or a year, in English words, ISO ``2023-05-08`` or Chinese
``2023年5月8日``).

Why: recall (:func:`~memjobs_worker.memory.engine.fused_search.rank_memories`)
puts first, among the memories that relate to a question, those said by the
person it asks about ("What did Caroline research?" is answered by what
Caroline said, not by Melanie's "Caroline, tell me about your research"; on
LoCoMo's development conversations 96 % of questions naming a speaker have an
evidence turn said by the first one named) and those dated in the span it
names ("What did Joanna watch on 1 May, 2022?"). Memories of any other shape
have neither and are ranked as before; nothing here knows a corpus's names.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from functools import lru_cache

from memjobs_worker.fulltext import is_unspaced_token

#: An optional leading stamp in brackets, then a name (a letter, then at most 39 letters,
#: spaces, dots, hyphens or apostrophes) and a colon: the shape of a line of a transcript.
_TURN = re.compile(r"^\s*(?:\[[^\[\]]{1,80}\]\s*)?(?P<speaker>[^\W\d_][\w.' -]{0,39}?)\s*(?::\s|：)")
_STAMP = re.compile(r"^\s*\[(?P<stamp>[^\[\]]{1,80})\]")

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTH = (
    r"(?P<month>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
#: The forms of a date, most precise first; a stretch of text read as one is not read again.
_DATES = [
    re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE),  # 8 May, 2023
    re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.IGNORECASE),  # May 8, 2023
    re.compile(r"(?<!\d)(?P<year>(?:19|20)\d\d)-(?P<month>[01]\d)-(?P<day>[0-3]\d)(?!\d)"),  # 2023-05-08
    re.compile(r"(?P<year>(?:19|20)\d\d)\s*年\s*(?P<month>[01]?\d)\s*月(?:\s*(?P<day>[0-3]?\d)\s*[日号])?"),
    re.compile(rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b", re.IGNORECASE),  # May 2023
    re.compile(r"(?<![\d-])(?P<year>(?:19|20)\d\d)(?![\d-])"),  # 2023
]


def date_spans(text: str) -> list[tuple[dt.date, dt.date]]:
    """The dates ``text`` names, each as the first and last day it covers (a day, a
    month or a year). A day that does not exist is read as its month when the text
    names one ("30 February 2023": February 2023), else left out."""
    spans: list[tuple[dt.date, dt.date]] = []
    taken: list[tuple[int, int]] = []
    for form in _DATES:
        for match in form.finditer(text):
            if any(match.start() < end and start < match.end() for start, end in taken):
                continue
            parts = match.groupdict()
            year = int(parts["year"])
            month = parts.get("month")
            try:
                if month is None:
                    first, last = dt.date(year, 1, 1), dt.date(year, 12, 31)
                else:
                    number = int(month) if month.isdigit() else _month_number(month)
                    if parts.get("day"):
                        first = last = dt.date(year, number, int(parts["day"]))
                    else:
                        first = dt.date(year, number, 1)
                        last = dt.date(year, number, calendar.monthrange(year, number)[1])
            except ValueError:
                continue
            taken.append((match.start(), match.end()))
            spans.append((first, last))
    return spans


def _month_number(name: str) -> int:
    prefix = name.lower().rstrip(".")[:3]
    return next(number for month, number in _MONTHS.items() if month.startswith(prefix))


def speaker_of(text: str) -> str | None:
    """Who said the memory, when it reads as a line of a transcript (``"[…] Name: …"``)."""
    match = _TURN.match(text)
    if not match:
        return None
    name = match.group("speaker").strip()
    # A name's words are capitalised where the script has cases: "I love it: …" is not a turn.
    return name if not any(word[0].islower() for word in name.split()) else None


def stamp_of(text: str) -> dt.date | None:
    """The day in the memory's leading ``[…]`` stamp, when it names one day."""
    match = _STAMP.match(text)
    return _day_of(match.group("stamp")) if match else None


def stamped(text: str, day: dt.date) -> str:
    """``text`` with ``day`` as its leading stamp (``"[2026-12-06] text"``), unless it
    has a stamp of its own: what a model reading it needs to place "yesterday", and
    what :func:`stamp_of` reads back from a fact that keeps it."""
    return text if _STAMP.match(text) else f"[{day.isoformat()}] {text}"


@lru_cache(maxsize=4096)
def _day_of(stamp: str) -> dt.date | None:
    # Cached: a conversation's turns share a few stamps, and reading one costs ~60 µs.
    days = [first for first, last in date_spans(stamp) if first == last]
    return days[0] if days else None


def named_speaker(question: str, speakers: set[str]) -> str | None:
    """The speaker the question names first, if any: a whole word, as written
    (a Chinese name anywhere in the text)."""
    found = []
    for name in speakers:
        unspaced = all(is_unspaced_token(ch) for ch in name if not ch.isspace())
        pattern = re.escape(name) if unspaced else rf"(?<!\w){re.escape(name)}(?!\w)"
        match = re.search(pattern, question)
        if match:
            found.append((match.start(), name))
    return min(found)[1] if found else None
