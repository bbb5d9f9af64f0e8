"""What a database outage looks like from a worker, and how its connections notice.

An outage is any failure that says "the server is not there, or not the one
to write to" rather than "this statement is wrong": a refused or timed-out
connection, a connection the server closed (a restart, kill -9 of the
postmaster, a terminated backend), a pool that could not hand out a connection
in time, and a write refused because the server is read-only (a primary
demoted by a failover, or a standby reached before the new primary).
:func:`is_outage` tells them apart from everything else, through the whole
``__cause__``/``__context__`` chain, so a :class:`BackendUnavailable` raised by
memjobs, SQLAlchemy's wrapper of a psycopg error, and psycopg's own error are
all recognised. A model service that is down (a ``ModelUnavailable`` but a
rejected request) is an outage too. The job retry policy (:mod:`memjobs_worker.jobs`) retries these
on a time budget instead of counting them against ``max_retries``.

Both connection pools drop what such an outage leaves behind before handing
it out: SQLAlchemy's (:func:`memjobs_worker.db.connect.create_db_engine`) and
psycopg's, under mem0's vector store (:class:`RecoveringPool`, which also
reconnects promptly once the server is back), with one test that costs no
round trip (:func:`closed_by_server`).
"""

from __future__ import annotations

import select
import time
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg_pool import ConnectionPool
from psycopg_pool.pool import AddConnection

from memjobs_client.errors import BackendUnavailable, ModelUnavailable
from memjobs_worker.db.idle import release_freed_memory

#: SQLSTATE of a write refused by a read-only server or transaction.
READ_ONLY_SQLSTATE = "25006"


def is_read_only_refusal(exc: BaseException) -> bool:
    """A write refused because the server (or its default transaction) is read-only."""
    return isinstance(exc, psycopg.Error) and getattr(exc, "sqlstate", None) == READ_ONLY_SQLSTATE


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` (or anything in its cause chain) says a backend is unreachable
    or, for the database, not writable, or that a model service is down (or its
    breaker open): transient, to be retried until it returns."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, BackendUnavailable):
            return True
        if isinstance(cause, ModelUnavailable) and cause.reason != ModelUnavailable.REJECTED:
            return True
        if isinstance(cause, (psycopg.OperationalError, psycopg.InterfaceError, sa.exc.DisconnectionError)):
            return True
        if isinstance(cause, sa.exc.DBAPIError) and (
            cause.connection_invalidated or isinstance(cause, (sa.exc.OperationalError, sa.exc.InterfaceError))
        ):
            return True
        if is_read_only_refusal(cause):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def closed_by_server(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection is dead, without a round trip.

    An idle connection has nothing to read unless the server said goodbye (a
    restart or a terminated backend sends its reason, then closes; a killed
    server's socket reads as closed), so a readable socket, or one psycopg
    already knows is closed, is dead. A silent network partition is not seen
    here: the next statement fails instead, and is retried.
    """
    if conn.closed or conn.pgconn.status != psycopg.pq.ConnStatus.OK:
        return True
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return bool(poller.poll(0))


class RecoveringPool(ConnectionPool[psycopg.Connection[Any]]):
    """psycopg's pool, for a server that may restart or fail over under it.

    - A pooled connection the server has closed is never handed out: it is
      closed and given back (the pool then opens another), and the next one
      is taken at once. (psycopg_pool's own ``check`` sleeps 1, 2, 4 … s
      between two dead connections: after an outage, with a pool full of them,
      a job could wait half a minute.)
    - A lost connection is replaced in the background at most
      ``max_reconnect_delay_s`` apart. (psycopg_pool waits twice as long after
      each failed attempt, for up to five minutes: after an outage of minutes
      its next attempt could come a minute after the server is back.)
    - Every connection left unused for a whole ``max_idle`` is closed at its
      end (down to ``min_size``). (psycopg_pool closes one a period: a pool
      of eight quiet connections took eight periods to shrink.)
    """

    def __init__(self, *args: Any, max_reconnect_delay_s: float = 1.0, **kwargs: Any) -> None:
        self.max_reconnect_delay_s = max_reconnect_delay_s
        super().__init__(*args, **kwargs)

    def getconn(self, timeout: float | None = None) -> psycopg.Connection[Any]:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            conn = super().getconn(timeout=deadline - time.monotonic())
            if not closed_by_server(conn):
                return conn
            conn.close()
            self.putconn(conn)  # closed: the pool discards it and opens another

    def _shrink_pool(self) -> None:
        to_close = []
        with self._lock:
            unused = self._nconns_min  # the fewest connections waiting in the pool during the period
            while unused > 0 and self._nconns > self._min_size and self._pool:
                to_close.append(self._pool.popleft())
                self._nconns -= 1
                unused -= 1
            self._nconns_min = len(self._pool)
        for conn in to_close:
            self._close_connection(conn)
        if to_close:
            release_freed_memory()

    def schedule_task(self, task: Any, delay: float) -> None:
        if isinstance(task, AddConnection):
            delay = min(delay, self.max_reconnect_delay_s)
        super().schedule_task(task, delay)
