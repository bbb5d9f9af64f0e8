"""Apply the Alembic migrations at start-up, one process at a time.

Several workers may start at once on several hosts: a PostgreSQL advisory lock
serialises them, and the second finds the schema already at head.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Engine

from memjobs_worker.db.connect import check_pgvector

_MIGRATIONS = Path(__file__).parent / "migrations"
#: An arbitrary constant: the advisory lock key of memjobs migrations.
_ADVISORY_KEY = 0x6D656D6A6F6273  # "memjobs"


def migrate(engine: Engine) -> None:
    """Bring the schema to head under an advisory lock.

    Raises:
        ConfigurationError: the server has no pgvector.
        BackendUnavailable: the database did not answer.
    """
    # Imported here: alembic logs its plugin set-up on import, and a worker
    # process has configured (JSON) logging by the time it migrates.
    from alembic import command
    from alembic.config import Config

    check_pgvector(engine)
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _ADVISORY_KEY})
        try:
            config = Config()
            config.set_main_option("script_location", str(_MIGRATIONS))
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
            conn.commit()
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _ADVISORY_KEY})
            conn.commit()
