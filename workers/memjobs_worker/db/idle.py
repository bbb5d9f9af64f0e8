"""Connections a quiet process gives back: each PostgreSQL connection is a
server process of its own (14-20 MB of resident memory), so a pool that keeps
its connections after a burst keeps those processes for as long as it lives.

:func:`close_when_idle` watches an engine: once none of its connections has
been checked out for ``after_s`` seconds, the connections its pool holds are
closed (the next checkout opens one, a few milliseconds on a local server).
One daemon thread per process looks every ``after_s / 2`` seconds at the
engines it watches; when it has closed some, it also hands the heap the
process freed back to the system (:func:`release_freed_memory`): what a burst
of work allocated and let go stays mapped in glibc's arenas otherwise.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import threading
import time
import weakref
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

log = logging.getLogger(__name__)

_watched: weakref.WeakKeyDictionary[Engine, _Quiet] = weakref.WeakKeyDictionary()
_watching = threading.Lock()
_thread: threading.Thread | None = None
_period_s = 60.0


class _Quiet:
    """When an engine's connections were last handed back, and how long they may then stay open."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self.last_used = time.monotonic()

    def used(self, *_: Any) -> None:
        self.last_used = time.monotonic()


def close_when_idle(engine: Engine, after_s: float) -> None:
    """Close ``engine``'s pooled connections once none has been in use for ``after_s`` seconds."""
    global _thread, _period_s
    quiet = _Quiet(after_s)
    sa.event.listen(engine, "checkout", quiet.used)
    sa.event.listen(engine, "checkin", quiet.used)
    with _watching:
        _watched[engine] = quiet
        _period_s = min(_period_s, max(0.05, after_s / 2))
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_watch, name="db-idle-closer", daemon=True)
            _thread.start()


def close_idle_now() -> int:
    """One look at every watched engine: close the pools of those quiet long
    enough (those with a connection checked out are left alone). Returns how
    many pools were closed."""
    now = time.monotonic()
    with _watching:
        engines = list(_watched.items())
    closed = 0
    for engine, quiet in engines:
        pool = engine.pool
        if not isinstance(pool, sa.pool.QueuePool) or pool.checkedin() == 0 or pool.checkedout() > 0:
            continue
        if now - quiet.last_used < quiet.after_s:
            continue
        # A new pool replaces the old one: a connection checked out meanwhile
        # goes back to the old pool, which closes it (no count of the new pool is touched).
        engine.dispose(close=True)
        closed += 1
    if closed:
        release_freed_memory()
    return closed


def _watch() -> None:
    while True:
        time.sleep(_period_s)
        try:
            close_idle_now()
        except Exception:  # noqa: BLE001 - a failed look must not end the watch
            log.warning("closing idle database connections failed", exc_info=True)


_libc: Any = None


def release_freed_memory() -> None:
    """Collect cycles, then give the free pages of glibc's heaps back to the
    system (``malloc_trim``; nothing elsewhere)."""
    global _libc
    gc.collect()
    if _libc is None:
        name = ctypes.util.find_library("c")
        _libc = ctypes.CDLL(name) if name else False
    trim = getattr(_libc, "malloc_trim", None) if _libc else None
    if trim is not None:
        trim(0)
