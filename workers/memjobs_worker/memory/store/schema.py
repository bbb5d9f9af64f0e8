"""The personal-memory ledger's tables, on the one metadata of the state database.

Migration ``0001_ledger`` (Alembic branch ``core``) creates them (``0005_failed_sources``
adds the ``failed`` state and its reason; ``0006_owner_keyed_ledger`` keys sources and
provenance by owner);
``tests/ops/test_migrations.py`` checks that these definitions and the migrated
database agree (see :mod:`memjobs_worker.db.metadata`).
"""

from __future__ import annotations

import sqlalchemy as sa

from memjobs_worker.db.metadata import key, keys, metadata, required, table, timestamp

#: Each remembered text: its state, and its text until it is forgotten. Keyed by
#: (owner, source id): a row is only ever read or written under its owner's key, so
#: no request of one owner can touch, create or revive a row of another, even one
#: that knows (or computes) the other's source id.
sources = table(
    "sources",
    *keys("owner_key", "source_id"),
    required("state"),
    required("kind"),
    sa.Column("session_id", sa.Text),
    sa.Column("text", sa.Text),  # cleared when the source is forgotten
    sa.Column("message_id", sa.Text),
    timestamp("created_at", nullable=False),
    timestamp("updated_at", nullable=False),
    timestamp("learned_at"),
    timestamp("forgotten_at"),
    sa.Column("reason", sa.Text),  # why a source is failed; never user text
    sa.CheckConstraint("state IN ('pending', 'learned', 'forgotten', 'failed')", name="sources_state"),
)
sa.Index("sources_owner_state", sources.c.owner_key, sources.c.state, sources.c.updated_at)

#: Which memories each source produced (a memory of a batch has several sources),
#: keyed by owner as the sources are.
provenance = table(
    "provenance",
    *keys("owner_key", "memory_id", "source_id"),
    sa.ForeignKeyConstraint(
        ["owner_key", "source_id"], ["sources.owner_key", "sources.source_id"], name="provenance_source_fkey"
    ),
)
sa.Index("provenance_source", provenance.c.owner_key, provenance.c.source_id)

#: The highest fencing token each owner's ledger commits have carried.
fencing = table(
    "fencing",
    key("owner_key"),
    required("token", sa.BigInteger),
)

#: Numbers the starts and ends of attempts across processes (tests prove no overlap).
attempt_events = sa.Sequence("attempt_events", metadata=metadata)

#: One row per extraction attempt, so the next holder can undo a crashed one.
attempts = table(
    "attempts",
    key("attempt_id"),
    required("owner_key"),
    required("token", sa.BigInteger),
    required("source_ids", sa.JSON),
    required("state"),
    required("pid", sa.Integer),
    required("started_seq", sa.BigInteger),
    sa.Column("ended_seq", sa.BigInteger),
    timestamp("started_at", nullable=False),
    sa.CheckConstraint("state IN ('open', 'committed', 'aborted', 'abandoned')", name="attempts_state"),
)
sa.Index("attempts_owner_state", attempts.c.owner_key, attempts.c.state)

#: Memories whose deletion from the vector store is owed (survives a crash).
tombstones = table(
    "tombstones",
    key("memory_id"),
    required("owner_key"),
    timestamp("created_at", nullable=False),
)
sa.Index("tombstones_owner", tombstones.c.owner_key)
