"""Memories' vectors and the model that made them: the start-up check and the re-embedding.

What: :func:`check_memory_vectors` runs when a process builds the mem0 engine:
it compares the embedder recorded for the ``memory`` space
(:mod:`memjobs_worker.embedding.record`) with this stack's, and refuses
(:class:`~memjobs_worker.embedding.record.EmbeddingModelChanged`) when they
differ or when another collection still holds memories.
:func:`reembed_memories` (``memjobs reembed``) moves every memory into the
current embedder's collection, re-embedding its text, batch by batch.

Why moving rows: mem0 keeps one collection (``mem0_memories_<dims>``) per
vector size. Each batch is inserted into the current collection and deleted
from the old one in one transaction, so an interrupted re-embedding resumes
where it stopped (what is left in the old collection), every memory keeps its
id (the ledger's provenance still points at it), and a search never compares
two models' vectors: it reads the current collection only, and the engine
refuses to start while another one still holds memories. A model change at
the same size first renames the collection aside (with its indexes).

A first start after the upgrade that introduced the record attributes the
memories of the current collection to the current embedder (they were made
by the configuration the stack ran with), and anything in another collection
to "another embedder".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from memjobs_worker.db import advisory
from memjobs_worker.embedding.record import EmbeddingModelChanged
from memjobs_worker.fulltext import index_tokens

#: Memories re-embedded per transaction (one embedding call each).
REEMBED_BATCH = 64
_PREFIX = "mem0_memories_"
#: A collection set aside because the model changed at the same vector size.
_ASIDE = "mem0_memories_reembed_"

Progress = Callable[[int, int], None]


def collection(dims: int) -> str:
    """mem0's collection for vectors of ``dims``."""
    return f"{_PREFIX}{dims}"


def _no_progress(done: int, total: int) -> None:
    return None


def check_memory_vectors(database_url: str, model: str, dims: int) -> None:
    """Refuse to serve memories another embedder made; record the embedder on a first start.

    Raises:
        EmbeddingModelChanged: the record names another embedder or size, or
            another collection still holds memories (an unfinished re-embedding).
    """
    with psycopg.connect(database_url, autocommit=True) as conn:
        if not _exists(conn, "embedding_models"):
            return  # a schema older than the record: nothing to compare with
        stored = _recorded(conn)
        others = _other_collections(conn, collection(dims))
        if stored is None:
            if others:
                raise EmbeddingModelChanged("memory", _describe(others), model, sum(others.values()))
            conn.execute(
                "INSERT INTO embedding_models (space, model, dims, updated_at) "
                "VALUES ('memory', %s, %s, now()) ON CONFLICT (space) DO NOTHING",
                (model, dims),
            )
            stored = _recorded(conn)
        if stored is not None and stored != (model, dims):
            count = sum(others.values()) + (_count(conn, collection(dims)) if stored[1] == dims else 0)
            raise EmbeddingModelChanged("memory", f"{stored[0]} ({stored[1]} dimensions)", model, count)
        if others:
            raise EmbeddingModelChanged("memory", _describe(others), model, sum(others.values()))


def memories_to_reembed(database_url: str, model: str, dims: int) -> int:
    """How many memories ``memjobs reembed`` would re-embed (0: nothing to do)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        if not _exists(conn, "embedding_models"):
            return 0
        stored = _recorded(conn)
        count = sum(_other_collections(conn, collection(dims)).values())
        if stored is not None and stored != (model, dims) and stored[1] == dims:
            count += _count(conn, collection(dims))
        return count


def reembed_memories(
    database_url: str,
    embedder: Any,
    model: str,
    dims: int,
    *,
    batch: int = REEMBED_BATCH,
    progress: Progress = _no_progress,
) -> int:
    """Re-embed every memory not in the current embedder's collection; returns how many.

    One at a time per database (an advisory lock); safe to interrupt and run
    again. ``progress(done, total)`` is called after each batch.
    """
    target = collection(dims)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (advisory.REEMBED,))
        try:
            with conn.transaction():
                stored = _recorded(conn)
                if stored is not None and stored != (model, dims) and stored[1] == dims and _exists(conn, target):
                    _set_aside(conn, target, f"{_ASIDE}{dims}")
                _create(conn, target, dims)
                conn.execute(
                    "INSERT INTO embedding_models (space, model, dims, updated_at) "
                    "VALUES ('memory', %s, %s, now()) ON CONFLICT (space) DO UPDATE "
                    "SET model = EXCLUDED.model, dims = EXCLUDED.dims, updated_at = now()",
                    (model, dims),
                )
            sources = _other_collections(conn, target)
            total, done = sum(sources.values()), 0
            progress(done, total)
            for source in sources:
                while True:
                    rows = conn.execute(
                        sql.SQL("SELECT id, payload FROM {} ORDER BY id LIMIT %s").format(sql.Identifier(source)),
                        (batch,),
                    ).fetchall()
                    if not rows:
                        break
                    payloads = [dict(r[1] or {}) for r in rows]
                    for p in payloads:
                        p["text_lemmatized"] = index_tokens(p.get("data") or "")
                    vectors = embedder.embed_batch([p.get("data") or "" for p in payloads], "add")
                    with conn.transaction():
                        with conn.cursor() as cur:
                            cur.executemany(
                                sql.SQL(
                                    "INSERT INTO {} (id, vector, payload) VALUES (%s, %s::vector, %s) "
                                    "ON CONFLICT (id) DO UPDATE SET vector = EXCLUDED.vector, "
                                    "payload = EXCLUDED.payload"
                                ).format(sql.Identifier(target)),
                                [
                                    (r[0], _literal(v), json.dumps(p))
                                    for r, v, p in zip(rows, vectors, payloads, strict=True)
                                ],
                            )
                        conn.execute(
                            sql.SQL("DELETE FROM {} WHERE id = ANY(%s)").format(sql.Identifier(source)),
                            ([r[0] for r in rows],),
                        )
                    done += len(rows)
                    progress(done, total)
                conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(source)))
            return done
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (advisory.REEMBED,))


def _literal(vector: Any) -> str:
    return "[" + ",".join(map(str, vector)) + "]"


def _recorded(conn: Any) -> tuple[str, int] | None:
    row = conn.execute("SELECT model, dims FROM embedding_models WHERE space = 'memory'").fetchone()
    return None if row is None else (row[0], int(row[1]))


def _exists(conn: Any, table: str) -> bool:
    return bool(conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0])


def _count(conn: Any, table: str) -> int:
    if not _exists(conn, table):
        return 0
    return int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0])


def _other_collections(conn: Any, current: str) -> dict[str, int]:
    """mem0's collections other than ``current`` that hold memories, with how many."""
    names = [
        r[0]
        for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE %s",
            (_PREFIX.replace("_", r"\_") + "%",),
        )
    ]
    counts = {name: _count(conn, name) for name in sorted(names) if name != current}
    return {name: n for name, n in counts.items() if n > 0}


def _describe(others: dict[str, int]) -> str:
    sizes = sorted({name.rsplit("_", 1)[-1] for name in others})
    return f"another embedder ({', '.join(sizes)} dimensions)"


def _create(conn: Any, table: str, dims: int) -> None:
    """The collection as mem0's pgvector provider creates it (mem0 adds its indexes later)."""
    conn.execute(
        sql.SQL("CREATE TABLE IF NOT EXISTS {} (id UUID PRIMARY KEY, vector vector({}), payload JSONB)").format(
            sql.Identifier(table), sql.Literal(dims)
        )
    )


def _set_aside(conn: Any, table: str, aside: str) -> None:
    """Rename a collection and its indexes, freeing the names for a new one."""
    if _exists(conn, aside):  # an earlier set-aside not yet emptied: merge into it
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT * FROM {} ON CONFLICT (id) DO NOTHING").format(
                sql.Identifier(aside), sql.Identifier(table)
            )
        )
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
        return
    for (index,) in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", (table,)).fetchall():
        conn.execute(
            sql.SQL("ALTER INDEX {} RENAME TO {}").format(
                sql.Identifier(index), sql.Identifier(index.replace(table, aside, 1))
            )
        )
    conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(sql.Identifier(table), sql.Identifier(aside)))
