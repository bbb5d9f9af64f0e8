"""Export an owner: JSON Lines, a header then every part's records.

The first line is the header (``format``, ``version``, when, the owner's id
and key); then each part's records in the order of
:func:`~memjobs_worker.lifecycle.build.owner_parts`, one JSON object per line,
each with its ``type`` (:mod:`~memjobs_worker.lifecycle.records`, and
docs/data-lifecycle.md for every field). Credentials are not there because
they were never stored. Lines are produced as the stores are read, so a large
export streams.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

from memjobs_worker.clock import Clock, utcnow
from memjobs_worker.lifecycle.parts import Owner, OwnerPart, Record
from memjobs_worker.lifecycle.records import Header


def export_lines(owner: Owner, parts: Sequence[OwnerPart], *, clock: Clock = utcnow) -> Iterator[str]:
    """The export of ``owner``, line by line (each ends with a newline).

    Raises:
        BackendUnavailable: a store did not answer (the lines so far are incomplete).
    """
    yield _line(Header(exported_at=clock(), owner_id=owner.id, owner_key=owner.key).record())
    for part in parts:
        for record in part.export(owner):
            yield _line(record)


def _line(record: Record) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
