"""Create the SQLAlchemy engine; translate "cannot connect" into memjobs errors.

A database URL may name several hosts, in libpq's syntax
(``postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write``, or
``?host=h1,h2&port=5432,5433``): libpq (psycopg, and mem0's pool) takes it as
it is, and :func:`sqlalchemy_url` rewrites it into the form SQLAlchemy parses
(``?host=h1:5432&host=h2:5432``), so every connection either opens goes
through the same hosts in the same order. memjobs replicates nothing: what
makes another host the writable one is the operator's failover tooling.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.engine import Connection, Engine

from memjobs_client.errors import BackendUnavailable, ConfigurationError
from memjobs_worker.db.idle import close_when_idle
from memjobs_worker.db.outage import closed_by_server, is_outage, is_read_only_refusal
from memjobs_worker.logs.redaction import redact_url

_SCHEMES = ("postgresql+psycopg://", "postgresql://", "postgres://")


def _strip_scheme(url: str) -> str:
    for prefix in _SCHEMES:
        if url.startswith(prefix):
            return url[len(prefix) :]
    raise ConfigurationError(f"MEMJOBS_DATABASE_URL must be a postgresql:// URL, got {redact_url(url)!r}")


def _libpq_params(url: str) -> dict[str, str]:
    """libpq's own reading of the URL (every multi-host form), through psycopg."""
    try:
        return {k: str(v) for k, v in conninfo_to_dict(libpq_url(url)).items()}
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(
            f"MEMJOBS_DATABASE_URL {redact_url(url)!r} cannot be read: {str(exc).split(':')[0]}"
        ) from None


def hosts_of(url: str) -> list[str]:
    """The ``host:port`` (or bare host) entries a URL names, in order."""
    params = _libpq_params(url)
    hosts = params["host"].split(",") if params.get("host") else []
    ports = params["port"].split(",") if params.get("port") else []
    if len(ports) == 1:
        ports = ports * len(hosts)
    if ports and len(ports) != len(hosts):
        raise ConfigurationError(
            f"MEMJOBS_DATABASE_URL names {len(hosts)} hosts and {len(ports)} ports: give one port, or one per host"
        )
    bracket = [f"[{h}]" if ":" in h else h for h in hosts]
    return [f"{h}:{p}" if p else h for h, p in zip(bracket, ports or [""] * len(hosts), strict=True)]


def sqlalchemy_url(url: str) -> str:
    """Use the psycopg 3 driver whatever the URL's scheme says; several hosts
    become SQLAlchemy's repeated ``host=`` query parameters."""
    hosts = hosts_of(url)
    if len(hosts) <= 1:
        return "postgresql+psycopg://" + _strip_scheme(url)
    if any(h.startswith("[") for h in hosts):
        raise ConfigurationError(
            "MEMJOBS_DATABASE_URL names several hosts, one of them an IPv6 address: "
            "name them by host name (SQLAlchemy cannot parse that list)"
        )
    params = _libpq_params(url)
    query: dict[str, str | tuple[str, ...]] = {
        k: v for k, v in params.items() if k not in ("host", "port", "user", "password", "dbname")
    }
    return sa.URL.create(
        "postgresql+psycopg",
        username=params.get("user"),
        password=params.get("password"),
        database=params.get("dbname"),
        query={"host": tuple(hosts), **query},
    ).render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """The same URL in the form libpq (and mem0's pgvector store) expects:
    libpq reads every multi-host form itself."""
    return "postgresql://" + _strip_scheme(url)


def create_db_engine(url: str, *, pool_size: int = 5, idle_close_s: float | None = None) -> Engine:
    """An engine whose pool drops connections the server has closed, so a
    restarted server costs at most one retry, not a crash (see :func:`_closed_by_server`),
    and forgets every pooled connection when a write is refused as read-only
    (a failover: the next connection finds the writable host, see :func:`_on_error`).
    With ``idle_close_s``, its pooled connections are closed once none has been
    used for that long (:func:`~memjobs_worker.db.idle.close_when_idle`)."""
    engine = sa.create_engine(
        sqlalchemy_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        connect_args={"connect_timeout": 5},
    )
    sa.event.listen(engine, "checkout", _closed_by_server)
    sa.event.listen(engine, "handle_error", _on_error)
    if idle_close_s:
        close_when_idle(engine, idle_close_s)
    return engine


def _closed_by_server(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    """On checkout, refuse a pooled connection the server has closed, without a round trip.

    SQLAlchemy's ``pool_pre_ping`` sends ``SELECT 1`` on every checkout, one
    round trip per transaction (half the cost of ``remember``'s one insert).
    :func:`~memjobs_worker.db.outage.closed_by_server` reads the socket instead;
    a dead connection is handed back as a disconnect and the pool opens a
    fresh one. What this cannot see (a silent network partition) fails the
    statement instead: SQLAlchemy then drops the whole pool, and the job is retried.
    """
    if closed_by_server(dbapi_connection):
        raise sa.exc.DisconnectionError("the server closed the connection")


def _on_error(context: Any) -> None:
    """A write refused as read-only means the connection reached a server that is
    no longer (or not yet) the primary: treat it as a disconnect, so SQLAlchemy
    discards the pool and the next connection goes through the URL's hosts again."""
    if context.original_exception is not None and is_read_only_refusal(context.original_exception):
        context.is_disconnect = True


def _unavailable(exc: BaseException) -> BackendUnavailable:
    orig = getattr(exc, "orig", None) or exc
    return BackendUnavailable(f"the state database did not answer: {orig}")


@contextmanager
def autocommit(engine: Engine) -> Iterator[Connection]:
    """A connection whose every statement commits by itself: one round trip for
    a statement that is atomic alone (no BEGIN, no COMMIT).

    Raises:
        BackendUnavailable: the database did not answer (or refused to write: read-only).
    """
    try:
        with engine.connect() as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT")
    except sa.exc.DBAPIError as exc:
        if is_outage(exc):
            raise _unavailable(exc) from exc
        raise


@contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    """One transaction; a database that does not answer becomes BackendUnavailable."""
    try:
        with engine.begin() as conn:
            yield conn
    except sa.exc.DBAPIError as exc:
        if is_outage(exc):
            raise _unavailable(exc) from exc
        raise


def run_one(engine: Engine, statement: str, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """:func:`run_rows`' first row, None when the statement returns none (or no rows at all)."""
    rows = run_rows(engine, statement, params)
    return rows[0] if rows else None


def run_rows(engine: Engine, statement: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Run one statement that is atomic alone on a pooled connection, straight
    through psycopg in autocommit (one round trip); the rows it returns (none
    for a statement without rows). ``statement`` is in psycopg's ``%(name)s`` form.

    For the hottest statement (remember's insert, a batch of sources at a time): SQLAlchemy's
    path around it (a Connection, the isolation level switched to autocommit at
    checkout and back at checkin, the compiled cache, the result) cost the cheap
    pool more CPU than the insert's own round trip. What the pool does stays:
    the checkout's dead-connection test and the idle tracking (pool events).
    What :func:`_on_error` does for SQLAlchemy's statements is done here: a
    connection that failed on an outage is discarded, and with it the pool
    (the next connection goes through the URL's hosts again).

    Raises:
        BackendUnavailable: the database did not answer (or refused to write: read-only).
        sqlalchemy.exc.DBAPIError: any other refusal, as SQLAlchemy raises it
            (its parameters, the owner's text among them, hidden).
    """
    try:
        pooled = engine.raw_connection()
    except (sa.exc.DBAPIError, psycopg.Error) as exc:  # a new connection's failure comes unwrapped
        if is_outage(exc):
            raise _unavailable(exc) from exc
        raise
    try:
        conn: psycopg.Connection[Any] = pooled.driver_connection  # type: ignore[assignment]
        conn.autocommit = True
        try:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description is not None else []
        finally:
            # The pool's other users expect transactions (no round trip when idle).
            if not conn.closed:
                conn.autocommit = False
    except psycopg.Error as exc:
        if is_outage(exc):
            pooled.invalidate(exc)
            engine.dispose(close=False)
            raise _unavailable(exc) from exc
        raise sa.exc.DBAPIError.instance(statement, params, exc, psycopg.Error, hide_parameters=True) from exc
    finally:
        pooled.close()
