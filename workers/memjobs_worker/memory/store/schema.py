"""SQLAlchemy Core tables mirroring the migrations (the migrations create them)."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

sources = sa.Table(
    "sources",
    metadata,
    sa.Column("source_id", sa.Text, primary_key=True),
    sa.Column("owner_key", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("session_id", sa.Text),
    sa.Column("text", sa.Text),
    sa.Column("message_id", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("learned_at", sa.DateTime(timezone=True)),
    sa.Column("forgotten_at", sa.DateTime(timezone=True)),
)

provenance = sa.Table(
    "provenance",
    metadata,
    sa.Column("memory_id", sa.Text, primary_key=True),
    sa.Column("source_id", sa.Text, primary_key=True),
    sa.Column("owner_key", sa.Text, nullable=False),
)

fencing = sa.Table(
    "fencing",
    metadata,
    sa.Column("owner_key", sa.Text, primary_key=True),
    sa.Column("token", sa.BigInteger, nullable=False),
)

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
)

tombstones = sa.Table(
    "tombstones",
    metadata,
    sa.Column("memory_id", sa.Text, primary_key=True),
    sa.Column("owner_key", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)
