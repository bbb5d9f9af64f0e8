"""Create the SQLAlchemy engine; translate "cannot connect" into memjobs errors."""

from __future__ import annotations

import select
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
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
    """An engine whose pool drops connections the server has closed, so a
    restarted server costs at most one retry, not a crash (see :func:`_closed_by_server`)."""
    engine = sa.create_engine(
        sqlalchemy_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        connect_args={"connect_timeout": 5},
    )
    sa.event.listen(engine, "checkout", _closed_by_server)
    return engine


def _closed_by_server(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    """On checkout, refuse a pooled connection the server has closed, without a round trip.

    SQLAlchemy's ``pool_pre_ping`` sends ``SELECT 1`` on every checkout, one
    round trip per transaction (half the cost of ``remember``'s one insert).
    An idle connection has nothing to read unless the server said goodbye (a
    restart or a terminated backend sends its reason, then closes), so a
    readable socket, or one psycopg knows is closed, is handed back as a
    disconnect and the pool opens a fresh one. What this cannot see (a silent
    network partition) fails the statement instead: SQLAlchemy then drops the
    whole pool, and the job is retried.
    """
    if dbapi_connection.closed or dbapi_connection.pgconn.status != psycopg.pq.ConnStatus.OK:
        raise sa.exc.DisconnectionError("the connection is closed")
    poller = select.poll()
    poller.register(dbapi_connection.fileno(), select.POLLIN)
    if poller.poll(0):
        raise sa.exc.DisconnectionError("the server closed the connection")


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
