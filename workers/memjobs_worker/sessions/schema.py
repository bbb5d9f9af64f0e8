"""Session-end state's tables, on the one metadata of the state database.

Migrations ``0002_sessions``, ``0004_session_run_leases``, ``0007_memory_audit``,
``0010_session_run_endings`` and ``0011_session_blackboard`` (Alembic branch ``core``) create them;
``tests/ops/test_migrations.py`` checks that these definitions and the migrated
database agree (see :mod:`memjobs_worker.db.metadata`). They live beside the
session code that reads them, so the ledger's
``memjobs_worker.memory.store.schema`` stays about the ledger.
"""

from __future__ import annotations

import sqlalchemy as sa

from memjobs_worker.db.metadata import keys, required, table, timestamp

#: The Markdown memory documents of the SQL provider: content and a version per (owner, doc).
memory_documents = table(
    "memory_documents",
    *keys("owner_key", "doc"),
    required("content"),
    required("version", sa.Integer),
    timestamp("updated_at", nullable=False),
    sa.CheckConstraint("doc IN ('USER.md', 'MEMORY.md')", name="memory_documents_doc"),
)

#: One row per (owner, session, kind) of session-end work: its idempotency record,
#: claimed under a lease (``holder``, ``lease_until``); ``state`` is running, or one of the
#: final states done, skipped and failed (``reason`` says why); ``dead_letter`` names the
#: dead letter that ended the run (its replay, and only it, may run it again).
session_runs = table(
    "session_runs",
    *keys("owner_key", "session_id", "kind"),
    required("state"),
    timestamp("created_at", nullable=False),
    timestamp("done_at"),
    sa.Column("holder", sa.Text),
    timestamp("lease_until"),
    required("attempts", sa.Integer, server_default="0"),
    sa.Column("reason", sa.Text),
    timestamp("updated_at"),
    sa.Column("dead_letter", sa.Text),
    sa.CheckConstraint("kind IN ('consolidate', 'digest')", name="session_runs_kind"),
    sa.CheckConstraint("state IN ('running', 'done', 'skipped', 'failed')", name="session_runs_state"),
)

#: A session's topic and gist, with the goals (never the status) of its tasks.
session_digests = table(
    "session_digests",
    *keys("owner_key", "session_id"),
    required("topic"),
    required("gist"),
    required("task_goals", sa.JSON),  # frozen at session end
    timestamp("created_at", nullable=False),
)
sa.Index("session_digests_owner_time", session_digests.c.owner_key, session_digests.c.created_at)

#: The task ledger: each task's live status; terminal rows expire after a while.
tasks = table(
    "tasks",
    *keys("owner_key", "task_id"),
    required("goal"),
    required("status"),
    timestamp("updated_at", nullable=False),
    timestamp("terminal_at"),  # when the status became terminal
)
sa.Index("tasks_terminal", tasks.c.terminal_at)

#: The memory audit: one row per patch the memory service handled (migration
#: ``0007_memory_audit``), never its text; rows expire after the audit retention.
memory_audit = table(
    "memory_audit",
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    timestamp("at", nullable=False),
    required("owner_key"),
    required("doc"),
    required("op"),
    required("applied", sa.Boolean),
    sa.Column("reason", sa.Text),
    sa.Column("version", sa.Integer),
    required("source"),
    sa.Column("session", sa.Text),
    sa.Column("turn", sa.Text),
    sa.Column("trace", sa.Text),
    sa.Column("host", sa.Text),
    sa.Column("pid", sa.Integer),
)
sa.Index("memory_audit_at", memory_audit.c.at)
sa.Index("memory_audit_owner", memory_audit.c.owner_key, memory_audit.c.id)

#: A session's L0 blackboard (migration ``0011_session_blackboard``): one row per entry,
#: idempotent by (owner, session, entry id), read back in event order (``seq``); kept
#: within the seeds' three limits (7 days from ``at``, 1,000 entries, 8 MB of
#: ``size_bytes`` per session), the oldest dropped first.
blackboard_entries = table(
    "blackboard_entries",
    *keys("owner_key", "session_id", "entry_id"),
    required("seq", sa.BigInteger),
    timestamp("at", nullable=False),
    required("trust"),
    required("priority", sa.Integer),
    sa.Column("kind", sa.Text),
    required("result"),
    required("evidence", sa.JSON),
    required("size_bytes", sa.Integer),
    timestamp("stored_at", nullable=False),
)
sa.Index(
    "blackboard_entries_order",
    blackboard_entries.c.owner_key,
    blackboard_entries.c.session_id,
    blackboard_entries.c.seq,
    blackboard_entries.c.entry_id,
)
sa.Index("blackboard_entries_at", blackboard_entries.c.at)
