"""The pool's check on checkout: a connection the server closed is replaced
before use, without a round trip per checkout (no ``SELECT 1``)."""

from __future__ import annotations

import psycopg
import sqlalchemy as sa

from memjobs_worker.db import create_db_engine


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
