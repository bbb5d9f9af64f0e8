"""Import an owner's export (:mod:`~memjobs_worker.lifecycle.export`) into this stack.

Every line is read and checked first (the header's format and version, each
record against its model): a file with one bad line writes nothing. Then each
part restores its records, in the parts' order (the sources before the
memories that name them). Idempotent: sources keep their ids (or, imported
for another owner, get the ids that owner's remember would give them),
memories and documents are matched by content, digests, tasks and knowledge
documents by their ids; a second import changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from memjobs_client.errors import InvalidPayload, SensitiveContent
from memjobs_worker.lifecycle.parts import Owner, OwnerPart, Record, Restoring
from memjobs_worker.lifecycle.records import FORMAT, VERSION, Header


@dataclass
class ImportReport:
    owner_key: str
    #: Records read, by type; and what each part changed.
    read: dict[str, int] = field(default_factory=dict)
    changed: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"status": "imported", "read": self.read, "changed": self.changed, "notes": self.notes}


def read_export(lines: Iterable[str], parts: Sequence[OwnerPart]) -> tuple[Header, list[Record]]:
    """The header and the records of an export, every line checked against the
    model its part declares (:attr:`~memjobs_worker.lifecycle.parts.OwnerPart.records`).

    Raises:
        InvalidPayload: not an export of a version this code reads, or a line
            that is not JSON or does not fit its record type (the line is named,
            never quoted).
    """
    models = {kind: model for part in parts for kind, model in part.records.items()}
    header: Header | None = None
    records: list[Record] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidPayload(f"line {number}: not JSON ({exc.msg})") from None
        if not isinstance(value, dict):
            raise InvalidPayload(f"line {number}: not a JSON object")
        if header is None:
            if value.get("format") != FORMAT:
                raise InvalidPayload(f"line {number}: not a memjobs owner export (no format {FORMAT!r} header)")
            if not isinstance(value.get("version"), int) or not 1 <= value["version"] <= VERSION:
                raise InvalidPayload(
                    f"line {number}: export version {value.get('version')!r}; "
                    f"this memjobs reads versions 1 to {VERSION}"
                )
            header = _checked(Header, value, number)
            continue
        model = models.get(str(value.get("type")))
        if model is None:
            raise InvalidPayload(f"line {number}: unknown record type (one of {', '.join(models)})")
        _checked(model, value, number)
        records.append(value)
    if header is None:
        raise InvalidPayload("the file is empty: no export header")
    return header, records


def _checked(model: type[Any], value: Record, number: int) -> Any:
    try:
        return model.model_validate(value)
    except SensitiveContent as exc:
        raise SensitiveContent(f"line {number}: {exc}", rule=exc.rule) from None
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})
        if any(e["type"] == "sensitive_content" for e in exc.errors()):
            raise SensitiveContent(
                f"line {number}: a {value.get('type')} record's {', '.join(fields)} looks like a credential"
            ) from None
        raise InvalidPayload(
            f"line {number}: a {value.get('type', 'header')} record with invalid fields: {', '.join(fields)}"
        ) from None


def import_owner(lines: Iterable[str], parts: Sequence[OwnerPart], *, owner_id: str | None = None) -> ImportReport:
    """Restore an export for its owner, or for ``owner_id`` (another owner).

    Raises:
        InvalidPayload: see :func:`read_export`; or an empty ``owner_id``.
        SensitiveContent: a source's text looks like a credential.
        BackendUnavailable: a store did not answer (run it again: it resumes).
    """
    header, records = read_export(lines, parts)
    try:
        owner = Owner.of(owner_id if owner_id is not None else header.owner_id)
    except ValueError:
        raise InvalidPayload("the owner must be a non-empty id") from None
    report = ImportReport(owner.key)
    for record in records:
        report.read[record["type"]] = report.read.get(record["type"], 0) + 1
    restoring = Restoring(from_key=header.owner_key)
    for part in parts:
        mine = [r for r in records if r["type"] in part.records]
        if mine:
            report.changed[part.name] = part.restore(owner, mine, restoring)
    report.notes = restoring.notes
    return report
