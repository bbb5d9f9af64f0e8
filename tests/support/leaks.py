"""Where a forgotten text could hide: files of data directories, every table of the
state database, every Redis key. Used by the forget tests across hosts."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import psycopg
import redis
from psycopg import sql


def files_holding(directories: Iterable[Path], needles: Iterable[str]) -> list[str]:
    """Paths (with the needle) of files under ``directories`` whose bytes contain a needle."""
    wanted = [n.encode("utf-8") for n in needles]
    found: list[str] = []
    for directory in directories:
        if not directory.exists():
            continue
        for path in directory.rglob("*"):
            if not path.is_file() or path.is_symlink():
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            found += [f"{path}: {n.decode()}" for n in wanted if n in data]
    return found


def tables_holding(database_url: str, needles: Iterable[str]) -> list[str]:
    """``schema.table: needle`` for every row of every user table whose text form
    contains a needle (vectors, JSON, arrays included: the whole row as text)."""
    found: list[str] = []
    with psycopg.connect(database_url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE' "
            "AND table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        for schema, table in tables:
            ident = sql.Identifier(schema, table)
            for needle in needles:
                query = sql.SQL("SELECT count(*) FROM {} t WHERE strpos(t::text, %s) > 0").format(ident)
                row = conn.execute(query, (needle,)).fetchone()
                if row and row[0]:
                    found.append(f"{schema}.{table}: {needle}")
    return found


def redis_keys_holding(client: redis.Redis, needles: Iterable[str | bytes]) -> list[str]:
    """Keys whose name or value (string, hash, list, set, sorted set) contains a needle."""
    wanted = [n if isinstance(n, bytes) else n.encode("utf-8") for n in needles]
    found: list[str] = []
    for key in client.scan_iter(count=500):
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        values: list[bytes | str] = []
        if kind == "string":
            values = [client.get(key) or b""]
        elif kind == "hash":
            values = [v for pair in client.hgetall(key).items() for v in pair]
        elif kind == "list":
            values = list(client.lrange(key, 0, -1))
        elif kind == "set":
            values = list(client.smembers(key))
        elif kind == "zset":
            # redis-py types the reply without telling the scored pairs apart.
            scored: list[tuple[bytes | str, float]] = client.zrange(  # type: ignore[assignment]
                key, 0, -1, withscores=True
            )
            values = [m for m, _ in scored]
        blob = b"\n".join(_bytes(v) for v in values) + b"\n" + _bytes(key)
        found += [f"{key!r}: {n.decode(errors='replace')}" for n in wanted if n in blob]
    return found


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()
