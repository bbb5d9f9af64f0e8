"""Create the SQLAlchemy engine; translate "cannot connect" into memjobs errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from memjobs_client.errors import BackendUnavailable, ConfigurationError
from memjobs_worker.settings import redact_url


def sqlalchemy_url(url: str) -> str:
    """Use the psycopg 3 driver whatever the URL's scheme says."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    raise ConfigurationError(
        f"MEMJOBS_DATABASE_URL must be a postgresql:// URL, got {redact_url(url)!r}"
    )


def libpq_url(url: str) -> str:
    """The same URL in the form libpq (and mem0's pgvector store) expects."""
    return "postgresql://" + sqlalchemy_url(url)[len("postgresql+psycopg://"):]


def create_db_engine(url: str, *, pool_size: int = 5) -> Engine:
    """An engine with pre-ping, so a restarted server costs one retry, not a crash."""
    return sa.create_engine(
        sqlalchemy_url(url),
        pool_pre_ping=True,
        pool_size=pool_size,
        max_overflow=pool_size,
        connect_args={"connect_timeout": 5},
    )


@contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    """One transaction; a database that does not answer becomes BackendUnavailable."""
    try:
        with engine.begin() as conn:
            yield conn
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        raise BackendUnavailable(f"the state database did not answer: {exc.orig}") from exc


def check_pgvector(engine: Engine) -> None:
    """Refuse a database whose server has no pgvector, naming the fix.

    Raises:
        ConfigurationError: the ``vector`` extension is not available.
        BackendUnavailable: the database did not answer.
    """
    try:
        with engine.connect() as conn:
            available = conn.execute(
                sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
            ).first()
    except sa.exc.OperationalError as exc:
        raise BackendUnavailable(
            f"the state database at {redact_url(str(engine.url.render_as_string()))} did not answer"
        ) from exc
    if available is None:
        raise ConfigurationError(
            "the database at "
            f"{engine.url.render_as_string(hide_password=True)} has no pgvector extension "
            "(memjobs stores mem0's vectors there): install pgvector on that server "
            "(e.g. `apt-get install postgresql-15-pgvector`), or leave MEMJOBS_DATABASE_URL "
            "unset to use the embedded PostgreSQL"
        )
