"""SQLAlchemy Core tables of session-end state, mirroring migrations ``0002_sessions``
and ``0003_session_run_leases``.

The migration creates them; these definitions only let the session store build
statements. They live beside the store that owns them so the ledger's
``memjobs_worker.memory.store.schema`` stays about the ledger.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

#: One row per (owner, session, kind) of session-end work: its idempotency record,
#: claimed under a lease (``holder``, ``lease_until``); ``state`` is running, done or failed.
session_runs = sa.Table(
    "session_runs",
    metadata,
    sa.Column("owner_key", sa.Text, primary_key=True),
    sa.Column("session_id", sa.Text, primary_key=True),
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("done_at", sa.DateTime(timezone=True)),
    sa.Column("holder", sa.Text),
    sa.Column("lease_until", sa.DateTime(timezone=True)),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("reason", sa.Text),
    sa.Column("updated_at", sa.DateTime(timezone=True)),
)

#: A session's topic and gist, with the goals (never the status) of its tasks.
session_digests = sa.Table(
    "session_digests",
    metadata,
    sa.Column("owner_key", sa.Text, primary_key=True),
    sa.Column("session_id", sa.Text, primary_key=True),
    sa.Column("topic", sa.Text, nullable=False),
    sa.Column("gist", sa.Text, nullable=False),
    sa.Column("task_goals", sa.JSON, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

#: The task ledger: each task's live status; terminal rows expire after a while.
tasks = sa.Table(
    "tasks",
    metadata,
    sa.Column("owner_key", sa.Text, primary_key=True),
    sa.Column("task_id", sa.Text, primary_key=True),
    sa.Column("goal", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("terminal_at", sa.DateTime(timezone=True)),
)
