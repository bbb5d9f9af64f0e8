"""A Markdown document checked whole: :func:`find_sensitive_document`.

Why (issue 31, item 3): the memory documents (USER.md, MEMORY.md) grow by
appends and replacements of a line or two, and checking only the added text
let a secret in split across edits: ``- 我的银行卡密码是`` in one append, ``- 739164``
in the next. Each half is clean; the document is not. So the memory service
checks the document an edit would produce, and consolidation checks the
documents before it sends them to a model.

How: the document is checked as it is, and once more with each line break
(and the list marker, quote or heading mark that opens the next line) read as
one space, so that a keyword ending one line and the value opening the next
are read as one sentence. Both passes are linear; a secret split over lines
that are not next to each other is not found (a heuristic, like the rest).
"""

from __future__ import annotations

import re

from memjobs_client.sensitive.content import find_sensitive_text
from memjobs_client.sensitive.rules import Finding

# A line break, blank lines after it, and what opens the next line in Markdown:
# indentation, a list marker ("-", "*", "+", "1.", "1)", "- [ ]"), a quote or a heading.
_LINE_JOIN = re.compile(
    r"[ \t]*+(?:\r?\n[ \t]*+)++(?:(?:[-*+]|\d{1,9}[.)]|>|#{1,6})[ \t]++(?:\[[ xX]\][ \t]++)?+)?+"
)


def joined_lines(text: str) -> str:
    """``text`` with each line break and the Markdown marker after it as one space."""
    return _LINE_JOIN.sub(" ", text)


def find_sensitive_document(text: str) -> Finding | None:
    """The first content rule a Markdown document matches, read line by line or
    with its lines joined (a secret split over two lines), or ``None``."""
    if not text:
        return None
    found = find_sensitive_text(text)
    if found is not None or "\n" not in text:
        return found
    return find_sensitive_text(joined_lines(text))
