"""The seam of an owner's whole data: one :class:`OwnerPart` per store.

Each part knows one store and answers three questions about one owner: drop
everything of theirs (:meth:`OwnerPart.erase`), say everything of theirs in
readable records (:meth:`OwnerPart.export`), and put exported records back
(:meth:`OwnerPart.restore`). Erase, export and import
(:mod:`~memjobs_worker.lifecycle.erase`, :mod:`~memjobs_worker.lifecycle.export`,
:mod:`~memjobs_worker.lifecycle.importer`) only walk the list that
:func:`memjobs_worker.lifecycle.build.owner_parts` builds: one more store is
one more entry there.

Every ``erase`` is idempotent (deleting what is already gone deletes
nothing), so an erasure interrupted between two parts is finished by running
it again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import BaseModel

from memjobs_client.contracts import owner_key
from memjobs_worker.knowledge.build import KnowledgeParts
from memjobs_worker.memory.build import MemoryParts
from memjobs_worker.sessions.build import SessionStores

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from memjobs_worker.memory.engine.base import MemoryEngine

Record = dict[str, Any]


@dataclass(frozen=True)
class Owner:
    """An owner as every store names it: the id (a host's memory provider maps
    tenants by it) and the key, sha256 of the id (everything else)."""

    id: str
    key: str

    @classmethod
    def of(cls, owner_id: str) -> Owner:
        """Raises ``ValueError`` for an empty or invalid owner id."""
        return cls(owner_id, owner_key(owner_id))


class StackParts(MemoryParts, SessionStores, KnowledgeParts, Protocol):
    """What the parts read of a stack (the :class:`~memjobs_worker.runtime.Runtime`
    is one): every feature's parts, the database and mem0. Each is built on its
    first read, so a part builds only what it uses; an erasure builds neither
    mem0 nor an embedder."""

    @property
    def db(self) -> Engine: ...
    @property
    def engine(self) -> MemoryEngine: ...


@dataclass
class Restoring:
    """What an import's parts share: the exported source ids and the ids they
    have in this stack (the same, unless the owner changed)."""

    #: The key of the owner the export was made of.
    from_key: str = ""
    source_ids: dict[str, str] = field(default_factory=dict)
    #: Notes for the report (e.g. a part skipped because its feature is off).
    notes: list[str] = field(default_factory=list)


class OwnerPart(ABC):
    """One store's share of an owner's data."""

    #: The store's name in reports and in the erasure's counts.
    name: str = ""
    #: The export record types this part writes and restores, each with the model
    #: that checks it (:mod:`~memjobs_worker.lifecycle.records`): an import checks
    #: every line against these before anything is written.
    records: ClassVar[dict[str, type[BaseModel]]] = {}
    #: Erased again at the end of an erasure: what a producer may add while it
    #: runs (a queued job, a queued-remember count), though the workers drop it.
    again_last: bool = False

    @abstractmethod
    def erase(self, owner: Owner) -> int:
        """Drop every record of ``owner`` in this store; how many were dropped.

        Idempotent: a second call finds nothing and returns 0.

        Raises:
            BackendUnavailable: the store did not answer (run the erasure again).
        """

    def export(self, owner: Owner) -> Iterator[Record]:
        """Every record of ``owner``, each a JSON object with its ``type``."""
        return iter(())

    def restore(self, owner: Owner, records: Sequence[Record], restoring: Restoring) -> int:
        """Put exported ``records`` (of the types in :attr:`records`) back for ``owner``;
        how many changed anything. Running it twice changes nothing the second time."""
        return 0
