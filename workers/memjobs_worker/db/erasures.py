"""The record of owner erasures: counts per store, never an owner.

Defined here, on the one metadata, because it belongs to no feature: the
erasure (:mod:`memjobs_worker.lifecycle`) spans them all. Migration
``0012_owner_erasures`` creates it.
"""

from __future__ import annotations

import sqlalchemy as sa

from memjobs_worker.db.metadata import metadata

owner_erasures = sa.Table(
    "owner_erasures",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
    sa.Column("counts", sa.JSON, nullable=False),  # {store: records dropped}; no owner, no text
)
