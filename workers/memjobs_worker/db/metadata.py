"""The one SQLAlchemy ``MetaData`` of the state database, and its Alembic branches.

What: every memjobs table is a ``Table`` on :data:`metadata`, defined beside the
code that reads it — the ledger in :mod:`memjobs_worker.memory.store.schema`,
session state and memory documents in :mod:`memjobs_worker.sessions.schema`, the
knowledge corpus in :mod:`memjobs_worker.knowledge.schema`. This module knows
none of them (the database layer lies below the features): the registry that
imports them all, so the metadata is complete, is
:mod:`memjobs_worker.schema`, at the wiring level. Alembic's ``env.py`` takes
its target from there, and the migration tests run autogenerate's comparison
between it and a freshly migrated database, so a table definition and its
migration cannot drift apart unnoticed.

Why two branches: knowledge is optional, and a feature switched off leaves no
table behind. Its tables carry ``info={"branch": KNOWLEDGE}`` and are created by
the migrations of the ``knowledge`` Alembic branch, applied only when knowledge
is on (:func:`memjobs_worker.db.migrate.migrate`); every other table belongs to
``core``, applied at every start-up.

:func:`table` and the column constructors (:func:`key`, :func:`keys`, :func:`required`, :func:`timestamp`) state
the conventions every table shares once: text unless said otherwise, times
with their zone.

Not here: mem0's vector tables (``mem0_memories_<dims>``). mem0's pgvector
provider creates them with the configured vector size, which is configuration,
not schema; :func:`include_object` leaves them out of every comparison.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.schema import SchemaItem

#: The Alembic branch applied at every start-up: ledger and session state.
CORE = "core"
#: The Alembic branch applied only when knowledge is on.
KNOWLEDGE = "knowledge"
BRANCHES = (CORE, KNOWLEDGE)

#: Tables whose names start so belong to mem0 (its pgvector collections).
MEM0_TABLE_PREFIX = "mem0_"

metadata = sa.MetaData()


def table(name: str, *items: SchemaItem, branch: str = CORE) -> sa.Table:
    """A table on :data:`metadata`, created by the migrations of ``branch``."""
    return sa.Table(name, metadata, *items, info={"branch": branch})


def key(name: str, type_: Any = sa.Text) -> sa.Column[Any]:
    """A primary-key column (text unless ``type_`` says otherwise)."""
    return sa.Column(name, type_, primary_key=True)


def keys(*names: str) -> list[sa.Column[Any]]:
    """The text primary-key columns ``names``, in key order."""
    return [key(name) for name in names]


def required(name: str, type_: Any = sa.Text, **options: Any) -> sa.Column[Any]:
    """A ``NOT NULL`` column (text unless ``type_`` says otherwise); ``options`` go to ``sa.Column``."""
    return sa.Column(name, type_, nullable=False, **options)


def timestamp(name: str, *, nullable: bool = True) -> sa.Column[Any]:
    """A point in time: every memjobs table stores its times with their zone."""
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def branch_of(table: sa.Table) -> str:
    """The Alembic branch whose migrations create ``table``."""
    branch = table.info.get("branch", CORE)
    assert branch in BRANCHES, f"table {table.name} names an unknown branch {branch!r}"
    return str(branch)


def include_object(branches: Collection[str]) -> Any:
    """An Alembic ``include_object`` hook comparing only the tables of ``branches``.

    Tables in the database but not in the metadata are compared too (so a
    migration that creates an undeclared table is noticed), except mem0's.
    """

    def include(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
        if type_ != "table":
            return True  # the columns, indexes and constraints of a table compared
        if reflected:  # a table only the database has
            return not (name or "").startswith(MEM0_TABLE_PREFIX)
        return branch_of(obj) in branches

    return include
