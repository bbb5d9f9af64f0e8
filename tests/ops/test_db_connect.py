"""The pool's check on checkout: a connection the server closed is replaced
before use, without a round trip per checkout (no ``SELECT 1``); a quiet pool
gives its connections back to the server (their backends end)."""

from __future__ import annotations

import socket

import psycopg
import pytest
import sqlalchemy as sa

from memjobs_client.errors import BackendUnavailable
from memjobs_worker.db import create_db_engine
from memjobs_worker.db.connect import run_one
from memjobs_worker.db.idle import close_idle_now
from memjobs_worker.db.outage import RecoveringPool
from tests.support.polling import wait_for


def _backend_pids(engine: sa.Engine) -> set[int]:
    with engine.connect() as conn:
        return {conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()}


def test_a_connection_terminated_by_the_server_is_replaced_on_checkout(database_url: str) -> None:
    engine = create_db_engine(database_url, pool_size=1)
    try:
        (first,) = _backend_pids(engine)  # now idle in the pool
        with psycopg.connect(database_url, autocommit=True) as admin:
            # Waits (up to 5 s) until the backend has said goodbye and exited.
            assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (first,)).fetchone() == (True,)
        # The next checkout sees the goodbye and opens a fresh connection: no error.
        (second,) = _backend_pids(engine)
        assert second != first
    finally:
        engine.dispose()


def test_checkout_sends_nothing_to_a_healthy_server(database_url: str) -> None:
    engine = create_db_engine(database_url, pool_size=1)
    sent: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda conn, cursor, statement, *rest: sent.append(statement))
    try:
        for _ in range(3):
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 42"))
        assert sent == ["SELECT 42"] * 3
    finally:
        engine.dispose()


def _alive(database_url: str, pids: set[int]) -> set[int]:
    with psycopg.connect(database_url, autocommit=True) as admin:
        rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", (list(pids),)).fetchall()
    return {int(r[0]) for r in rows}


def _three_at_once(engine: sa.Engine) -> set[int]:
    with engine.connect() as a, engine.connect() as b, engine.connect() as c:
        return {conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() for conn in (a, b, c)}


def test_a_quiet_pool_closes_its_connections_and_opens_one_when_asked_again(database_url: str) -> None:
    engine = create_db_engine(database_url, pool_size=3, idle_close_s=0.2)
    try:
        pids = _three_at_once(engine)
        assert len(pids) == 3 and _alive(database_url, pids) == pids  # kept in the pool, for now
        wait_for(lambda: not _alive(database_url, pids) or None, 30, "the idle connections closed")
        again = _backend_pids(engine)
        assert again.isdisjoint(pids)  # a fresh connection, no error
        wait_for(lambda: not _alive(database_url, again) or None, 30, "the new pool's connection closed")
    finally:
        engine.dispose()


def test_a_pool_with_a_connection_in_use_is_left_open(database_url: str) -> None:
    engine = create_db_engine(database_url, pool_size=2, idle_close_s=0.01)
    try:
        with engine.connect() as held:
            pid = held.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
            with engine.connect() as other:
                other.execute(sa.text("SELECT 1"))  # now idle in the pool beside the held one
            close_idle_now()
            assert held.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() == pid
            pool = engine.pool
            assert isinstance(pool, sa.pool.QueuePool) and pool.checkedin() == 1  # kept while one is in use
    finally:
        engine.dispose()


def test_the_vector_stores_pool_closes_every_connection_unused_for_a_period(database_url: str) -> None:
    pool = RecoveringPool(conninfo=database_url, min_size=0, max_size=4, max_idle=0.2, open=False)
    pool.open(wait=False)
    try:
        with pool.connection() as a, pool.connection() as b, pool.connection() as c:
            pids = {conn.info.backend_pid for conn in (a, b, c)}
        assert pool.get_stats()["pool_size"] == 3
        wait_for(lambda: pool.get_stats()["pool_size"] == 0 or None, 30, "the unused connections closed")
        assert not _alive(database_url, pids)
        with pool.connection() as again:
            assert again.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()


def test_run_one_leaves_the_pooled_connection_in_transactions(database_url: str) -> None:
    engine = create_db_engine(database_url, pool_size=1)
    try:
        assert run_one(engine, "SELECT %(n)s::int", {"n": 7}) == (7,)
        assert run_one(engine, "SELECT 1 WHERE false", {}) is None
        with engine.connect() as conn:  # the same pooled connection: in a transaction again
            assert conn.connection.driver_connection.autocommit is False  # type: ignore[union-attr]
            conn.execute(sa.text("CREATE TEMP TABLE t (n int)"))
            conn.rollback()
            assert conn.execute(sa.text("SELECT to_regclass('pg_temp.t')")).scalar_one() is None
    finally:
        engine.dispose()


def test_run_one_drops_the_pool_when_a_write_is_refused_as_read_only(database_url: str) -> None:
    engine = create_db_engine(database_url, pool_size=1)
    try:
        (first,) = _backend_pids(engine)
        # This connection turns read-only, as a demoted primary's do.
        run_one(engine, "SET default_transaction_read_only = on", {})
        with pytest.raises(BackendUnavailable):
            run_one(engine, "CREATE TABLE run_one_refused (n int)", {})
        (second,) = _backend_pids(engine)
        assert second != first
        assert run_one(engine, "SHOW default_transaction_read_only", {}) == ("off",)
    finally:
        engine.dispose()


def test_run_one_raises_a_refusal_as_sqlalchemy_does_with_the_parameters_hidden(database_url: str) -> None:
    engine = create_db_engine(database_url, pool_size=1)
    try:
        with pytest.raises(sa.exc.DataError) as refused:
            run_one(engine, "SELECT 1 / %(zero)s::int, %(text)s::text", {"zero": 0, "text": "the owner's words"})
        assert "owner's words" not in str(refused.value)
        assert run_one(engine, "SELECT 1", {}) == (1,)  # the connection is usable again
    finally:
        engine.dispose()


def test_run_one_says_the_database_is_unavailable_when_no_connection_opens() -> None:
    """A connection the pool cannot open fails unwrapped (psycopg's own error,
    not SQLAlchemy's): it is an outage all the same, retried on the outage
    budget (tests/faults/test_faults.py found it: remember failed with a bare
    OperationalError while the database was stopped)."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = create_db_engine(f"postgresql://postgres@127.0.0.1:{port}/none?connect_timeout=2", pool_size=1)
    try:
        with pytest.raises(BackendUnavailable):
            run_one(engine, "SELECT 1", {})
    finally:
        engine.dispose()
