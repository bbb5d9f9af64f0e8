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
def autocommit(engine: Engine) -> Iterator[Connection]:
    """A connection whose every statement commits by itself: one round trip for
    a statement that is atomic alone (no BEGIN, no COMMIT).

    Raises:
        BackendUnavailable: the database did not answer.
    """
    try:
        with engine.connect() as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT")
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        raise BackendUnavailable(f"the state database did not answer: {exc.orig}") from exc


@contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    """One transaction; a database that does not answer becomes BackendUnavailable."""
    try:
        with engine.begin() as conn:
            yield conn
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        raise BackendUnavailable(f"the state database did not answer: {exc.orig}") from exc
