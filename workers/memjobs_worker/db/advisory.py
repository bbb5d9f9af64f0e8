"""Every PostgreSQL advisory lock memjobs takes, in one registry.

Advisory locks share one key space per database with any other software using
the same database, so memjobs' keys are spelled from ASCII tags ("memjobs",
"mdoc") and listed here, where a new one can be checked against the others
(``tests/ops/test_migrations.py`` asserts they are distinct).

PostgreSQL keeps the one-``bigint`` form and the two-``int4`` form apart (they
never block each other); both forms are used:

- :data:`MIGRATIONS` (one ``bigint`` key, session-scoped): held while Alembic
  upgrades the schema, so workers starting together on several hosts migrate
  one at a time and the later ones find the schema at head
  (:func:`memjobs_worker.db.migrate.migrate`).
- :data:`MEMORY_DOCUMENTS` with :func:`owner_lock_key` (two ``int4`` keys,
  transaction-scoped): serialises the writers of one owner's memory documents
  in the SQL provider (:mod:`memjobs_worker.sessions.memory_docs.sql`).
- :data:`BLACKBOARD` with :func:`owner_lock_key` of a session's key
  (transaction-scoped): serialises the appends to one session's blackboard,
  so its limits are applied to one state at a time
  (:mod:`memjobs_worker.sessions.blackboard`).
"""

from __future__ import annotations

#: The one-key lock of schema migrations: "memjobs" in ASCII.
MIGRATIONS = 0x6D656D6A6F6273
#: The class (first key) of the per-owner memory-document locks: "mdoc" in ASCII.
MEMORY_DOCUMENTS = 0x6D646F63
#: The class of the per-session blackboard locks: "mjbb" in ASCII.
BLACKBOARD = 0x6D6A6262

#: The one-key lock of a re-embedding (``memjobs reembed``): "mjreemb" in ASCII.
REEMBED = 0x6D6A7265656D62

#: Every one-key lock (``pg_advisory_lock(bigint)``).
ONE_KEY_LOCKS = {"migrations": MIGRATIONS, "reembed": REEMBED}
#: Every class of two-key locks (``pg_advisory_xact_lock(int, int)``).
TWO_KEY_CLASSES = {"memory_documents": MEMORY_DOCUMENTS, "blackboard": BLACKBOARD}


def owner_lock_key(owner_key: str) -> int:
    """The second key of an owner's two-key lock: a signed 32-bit slice of its hash.

    ``owner_key`` is the hex sha256 of an owner id (never the id), so its first
    eight hex digits are as good as any 32 bits of it.
    """
    value = int(owner_key[:8], 16)
    return value - (1 << 32) if value >= (1 << 31) else value
