"""An owner's whole data: erase it everywhere, export it, import an export.

One :class:`OwnerPart` per store (:mod:`~memjobs_worker.lifecycle.parts`),
listed once by :func:`owner_parts`; :func:`erase_owner`, :func:`export_lines`
and :func:`import_owner` walk that list. The CLI (``memjobs erase``,
``export``, ``import``) and the HTTP API (``DELETE /v1/owners``,
``GET /v1/owners/export``) call them. docs/data-lifecycle.md says what each
guarantees.
"""

from memjobs_worker.lifecycle.build import owner_parts
from memjobs_worker.lifecycle.erase import EraseReport, erase_owner, erasures
from memjobs_worker.lifecycle.export import export_lines
from memjobs_worker.lifecycle.importer import ImportReport, import_owner, read_export
from memjobs_worker.lifecycle.parts import Owner, OwnerPart, Restoring
from memjobs_worker.lifecycle.queues import EraseIncomplete
from memjobs_worker.lifecycle.records import FORMAT, VERSION

__all__ = [
    # the seam
    "Owner",
    "OwnerPart",
    "Restoring",
    "owner_parts",
    # erase
    "EraseIncomplete",
    "EraseReport",
    "erase_owner",
    "erasures",
    # export and import
    "FORMAT",
    "VERSION",
    "ImportReport",
    "export_lines",
    "import_owner",
    "read_export",
]
