"""The registry of every memjobs table, at the wiring level.

What: :func:`schema_metadata` returns :data:`memjobs_worker.db.metadata.metadata`
with the tables of every feature on it (the ledger, session state and memory
documents, the knowledge corpus), and :func:`schema_drift` compares it with a
migrated database.

Why here and not in ``db/``: each feature defines its tables beside the code
that reads them, on the database layer's one ``MetaData``; the database layer
lies below the features and does not import them. Only this module, above the
features, lists them all. Alembic's ``env.py`` takes its target metadata from
:func:`schema_metadata`, and the migration tests run :func:`schema_drift`, so a
table definition and its migration cannot drift apart unnoticed.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

import memjobs_worker.db.erasures
import memjobs_worker.embedding.record
import memjobs_worker.knowledge.schema
import memjobs_worker.memory.store.schema
import memjobs_worker.sessions.schema  # noqa: F401  (each defines its tables on metadata)
from memjobs_worker.db.metadata import include_object, metadata
from memjobs_worker.db.migrate import branches
from memjobs_worker.db.pgvector import reflect_vector


def schema_metadata() -> sa.MetaData:
    """The state database's ``MetaData`` with every memjobs table on it."""
    return metadata


def schema_drift(conn: Connection, *, knowledge: bool = True) -> list[Any]:
    """What autogenerate finds between the metadata and the database on ``conn``.

    An empty list means the migrated database and the table definitions agree
    (for the branches a database with ``knowledge`` on or off has). Tables only
    the database has count as drift, mem0's vector tables excepted.
    """
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    reflect_vector(conn.dialect)
    context = MigrationContext.configure(
        conn,
        opts={
            "include_object": include_object(branches(knowledge=knowledge)),
            "compare_type": True,
        },
    )
    return list(compare_metadata(context, schema_metadata()))
