"""Records built from result rows."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    Record = TypeVar("Record", bound=DataclassInstance)


def record_of(cls: type[Record], row: Any, **values: Any) -> Record:
    """The dataclass ``cls`` with each field read from ``row``'s column of the same name,
    but for the fields ``values`` gives."""
    return cls(**{f.name: getattr(row, f.name) for f in fields(cls) if f.name not in values}, **values)
