"""Apply the Alembic migrations, one process at a time; compare them with the metadata.

The migrations form two branches (see :mod:`memjobs_worker.db.metadata`):
``core`` (ledger and session state), applied at every start-up, and
``knowledge``, applied only when knowledge is on, so a database whose
knowledge is off holds no knowledge table.

Several workers may start at once on several hosts: the advisory lock
:data:`~memjobs_worker.db.advisory.MIGRATIONS` serialises them, and the later
ones find the schema already at head.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from memjobs_client.errors import ConfigurationError
from memjobs_worker.db import advisory
from memjobs_worker.db.metadata import CORE, KNOWLEDGE
from memjobs_worker.db.pgvector import check_pgvector

_MIGRATIONS = Path(__file__).parent / "migrations"


def branches(*, knowledge: bool) -> tuple[str, ...]:
    """The Alembic branches a database with knowledge on or off is migrated along."""
    return (CORE, KNOWLEDGE) if knowledge else (CORE,)


def migrate(engine: Engine, *, knowledge: bool = False) -> None:
    """Bring the ``core`` branch (and, with ``knowledge``, the knowledge branch) to head.

    Raises:
        ConfigurationError: the server has no pgvector, or the schema is at a
            revision these migrations do not know (a newer memjobs migrated it).
        BackendUnavailable: the database did not answer.
    """
    # Imported here: alembic logs its plugin set-up on import, and a worker
    # process has configured (JSON) logging by the time it migrates.
    from alembic import command
    from alembic.util.exc import CommandError

    check_pgvector(engine)
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": advisory.MIGRATIONS})
        try:
            config = _config(conn)
            for branch in branches(knowledge=knowledge):
                command.upgrade(config, f"{branch}@head")
            conn.commit()
        except CommandError as exc:
            conn.rollback()
            raise ConfigurationError(
                f"the state database's schema cannot be migrated by this memjobs ({exc}); "
                "a database migrated by a newer memjobs needs that version on every host"
            ) from exc
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": advisory.MIGRATIONS})
            conn.commit()


def _config(conn: Connection) -> Any:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = conn
    return config


def current_revisions(engine: Engine) -> list[str]:
    """The Alembic revisions the database is at (one per migrated branch), sorted;
    empty for a database never migrated."""
    from sqlalchemy import inspect

    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return []
        return sorted(str(r[0]) for r in conn.execute(text("SELECT version_num FROM alembic_version")))


def known_revisions() -> dict[str, str]:
    """Every revision these migrations know, with its branch (``core`` or ``knowledge``):
    a revision missing here was made by a newer memjobs."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(_MIGRATIONS))
    known: dict[str, str] = {}
    for branch in (CORE, KNOWLEDGE):
        for revision in script.iterate_revisions(f"{branch}@head", "base"):
            known.setdefault(revision.revision, branch)
    return known
