"""The sessions' L0 blackboards of an owner: erased, exported as one record per
entry, and restored through the blackboard store (idempotent by entry id, the
three limits applied as on any append)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import groupby
from typing import Literal

from memjobs_client.contracts import BlackboardEntry
from memjobs_worker.db.connect import transaction
from memjobs_worker.lifecycle.parts import Owner, OwnerPart, Record, Restoring, StackParts
from memjobs_worker.lifecycle.records import _Record
from memjobs_worker.sessions.blackboard import erase_owner, export_owner


class BlackboardRecordOut(_Record, BlackboardEntry):
    """One blackboard entry with its session (the entry's own fields, checked as
    an append checks them: credentials refused)."""

    type: Literal["blackboard_entry"] = "blackboard_entry"
    session_id: str

    def entry(self) -> BlackboardEntry:
        return BlackboardEntry.model_validate(self.model_dump(exclude={"type", "session_id"}))


class BlackboardPart(OwnerPart):
    """Every session blackboard of the owner (``blackboard_entries``)."""

    name = "blackboard"
    records = {"blackboard_entry": BlackboardRecordOut}

    def __init__(self, stack: StackParts) -> None:
        self._stack = stack

    def erase(self, owner: Owner) -> int:
        with transaction(self._stack.blackboard.engine) as conn:
            return erase_owner(conn, owner.id)

    def export(self, owner: Owner) -> Iterator[Record]:
        with transaction(self._stack.blackboard.engine) as conn:
            sessions = export_owner(conn, owner.id)
        for session_id, entries in sessions.items():
            for entry in entries:
                yield BlackboardRecordOut.model_validate({**entry, "session_id": session_id}).record()

    def restore(self, owner: Owner, records: Sequence[Record], restoring: Restoring) -> int:
        models = sorted((BlackboardRecordOut.model_validate(r) for r in records), key=lambda m: m.session_id)
        store = self._stack.blackboard
        return sum(
            store.append(owner.key, session_id, [m.entry() for m in group]).added
            for session_id, group in groupby(models, key=lambda m: m.session_id)
        )
