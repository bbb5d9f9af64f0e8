"""The personal-memory ledger's tables, on the one metadata of the state database.

Migration ``0001_ledger`` (Alembic branch ``core``) creates them (``0005_failed_sources``
adds the ``failed`` state and its reason; ``0006_owner_keyed_ledger`` keys sources and
provenance by owner);
``tests/ops/test_migrations.py`` checks that these definitions and the migrated
database agree (see :mod:`memjobs_worker.db.metadata`).
"""

from __future__ import annotations

import sqlalchemy as sa

from memjobs_worker.db.metadata import metadata

#: Each remembered text: its state, and its text until it is forgotten. Keyed by
#: (owner, source id): a row is only ever read or written under its owner's key, so
#: no request of one owner can touch, create or revive a row of another, even one
#: that knows (or computes) the other's source id.
sources = sa.Table(
    "sources",
    metadata,
    sa.Column("owner_key", sa.Text, primary_key=True),
    sa.Column("source_id", sa.Text, primary_key=True),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("session_id", sa.Text),
    sa.Column("text", sa.Text),  # cleared when the source is forgotten
    sa.Column("message_id", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("learned_at", sa.DateTime(timezone=True)),
    sa.Column("forgotten_at", sa.DateTime(timezone=True)),
    sa.Column("reason", sa.Text),  # why a source is failed; never user text
    sa.CheckConstraint("state IN ('pending', 'learned', 'forgotten', 'failed')", name="sources_state"),
)
sa.Index("sources_owner_state", sources.c.owner_key, sources.c.state, sources.c.updated_at)

#: Which memories each source produced (a memory of a batch has several sources),
#: keyed by owner as the sources are.
provenance = sa.Table(
    "provenance",
    metadata,
    sa.Column("owner_key", sa.Text, primary_key=True),
    sa.Column("memory_id", sa.Text, primary_key=True),
    sa.Column("source_id", sa.Text, primary_key=True),
    sa.ForeignKeyConstraint(
        ["owner_key", "source_id"], ["sources.owner_key", "sources.source_id"], name="provenance_source_fkey"
    ),
)
sa.Index("provenance_source", provenance.c.owner_key, provenance.c.source_id)

#: The highest fencing token each owner's ledger commits have carried.
fencing = sa.Table(
    "fencing",
    metadata,
    sa.Column("owner_key", sa.Text, primary_key=True),
    sa.Column("token", sa.BigInteger, nullable=False),
)

#: Numbers the starts and ends of attempts across processes (tests prove no overlap).
attempt_events = sa.Sequence("attempt_events", metadata=metadata)

#: One row per extraction attempt, so the next holder can undo a crashed one.
attempts = sa.Table(
    "attempts",
    metadata,
    sa.Column("attempt_id", sa.Text, primary_key=True),
    sa.Column("owner_key", sa.Text, nullable=False),
    sa.Column("token", sa.BigInteger, nullable=False),
    sa.Column("source_ids", sa.JSON, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started_seq", sa.BigInteger, nullable=False),
    sa.Column("ended_seq", sa.BigInteger),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("state IN ('open', 'committed', 'aborted', 'abandoned')", name="attempts_state"),
)
sa.Index("attempts_owner_state", attempts.c.owner_key, attempts.c.state)

#: Memories whose deletion from the vector store is owed (survives a crash).
tombstones = sa.Table(
    "tombstones",
    metadata,
    sa.Column("memory_id", sa.Text, primary_key=True),
    sa.Column("owner_key", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)
sa.Index("tombstones_owner", tombstones.c.owner_key)
