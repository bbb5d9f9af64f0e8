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

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from memjobs_client.errors import BackendUnavailable, ConfigurationError
from memjobs_worker.db import advisory
from memjobs_worker.db.metadata import CORE, KNOWLEDGE
from memjobs_worker.db.pgvector import check_pgvector

_MIGRATIONS = Path(__file__).parent / "migrations"
#: Each branch's newest revision (tests/ops/test_migrations.py holds them to the
#: scripts'): a database already there is not handed to Alembic, so a process that
#: finds its schema migrated (every worker started after ``up`` or another host
#: migrated it) never imports it (8 MB that would stay for the process's life).
HEADS = {CORE: "0012_owner_erasures", KNOWLEDGE: "0009_knowledge_embedding_cache"}


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
    check_pgvector(engine)
    if at_head(engine, knowledge=knowledge):
        return
    # Imported here: alembic logs its plugin set-up on import, and a worker
    # process has configured (JSON) logging by the time it migrates.
    from alembic import command
    from alembic.util.exc import CommandError

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


def at_head(engine: Engine, *, knowledge: bool = False) -> bool:
    """Whether the database is at the head of every branch it is migrated along."""
    return {HEADS[branch] for branch in branches(knowledge=knowledge)} <= set(current_revisions(engine))


def migrate_apart(database_url: str, *, knowledge: bool = False) -> None:
    """:func:`migrate`, for a process that lives long (``memjobs up``): a database
    at head is only checked here; else the migrations run in a short-lived child
    process, so this one never imports Alembic.

    Raises:
        ConfigurationError: as :func:`migrate`, or the child failed otherwise.
        BackendUnavailable: the database did not answer.
    """
    from memjobs_worker.db.connect import create_db_engine

    engine = create_db_engine(database_url, pool_size=1)
    try:
        check_pgvector(engine)
        if at_head(engine, knowledge=knowledge):
            return
    finally:
        engine.dispose()
    child = subprocess.run(  # noqa: S603 - this interpreter, a fixed program
        [sys.executable, "-c", "from memjobs_worker.db.migrate import _migrate_child; _migrate_child()"],
        input=json.dumps({"url": database_url, "knowledge": knowledge}),
        capture_output=True,
        text=True,
    )
    if child.returncode == 0:
        return
    try:
        failure = json.loads(child.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ConfigurationError(
            f"migrating the state database failed (exit {child.returncode}): {child.stderr.strip()[-2000:]}"
        ) from None
    error = BackendUnavailable if failure["kind"] == "unavailable" else ConfigurationError
    raise error(failure["message"])


def _migrate_child() -> None:
    """The child of :func:`migrate_apart`: the URL and the branches on stdin; a
    failure as one JSON line on stdout, and a non-zero exit."""
    from memjobs_worker.db.connect import create_db_engine

    asked = json.loads(sys.stdin.read())
    engine = create_db_engine(asked["url"], pool_size=1)
    try:
        migrate(engine, knowledge=asked["knowledge"])
    except (ConfigurationError, BackendUnavailable) as exc:
        kind = "unavailable" if isinstance(exc, BackendUnavailable) else "configuration"
        print(json.dumps({"kind": kind, "message": str(exc)}))
        sys.exit(1)
    finally:
        engine.dispose()


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
