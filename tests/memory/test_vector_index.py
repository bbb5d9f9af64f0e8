"""mem0's vectors are indexed by owner, not by an HNSW graph over every owner's
vectors: each owner's search is exact, however many other owners share the table."""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from memjobs_client.contracts import owner_key, source_id_for
from memjobs_worker.db.connect import libpq_url
from tests.support.ledger import hashing_mem0_engine, pending_source

DIMS = 64
TABLE = f"mem0_memories_{DIMS}"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _engine(database_url: str, data_dir: Path):  # type: ignore[no-untyped-def]
    return hashing_mem0_engine(database_url, data_dir, DIMS)


def _indexes(database_url: str) -> set[str]:
    with psycopg.connect(libpq_url(database_url)) as conn:
        return {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", (TABLE,))}


def test_the_vectors_are_indexed_by_owner_and_an_older_hnsw_index_is_dropped(database_url: str, tmp_path: Path) -> None:
    _engine(database_url, tmp_path / "a").close()
    assert f"{TABLE}_owner_idx" in _indexes(database_url)
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:  # as an older version left it
        conn.execute(f"CREATE INDEX {TABLE}_hnsw_idx ON {TABLE} USING hnsw (vector vector_cosine_ops)")
    _engine(database_url, tmp_path / "b").close()
    assert f"{TABLE}_hnsw_idx" not in _indexes(database_url)
    assert f"{TABLE}_owner_idx" in _indexes(database_url)


def test_an_owners_search_finds_all_of_its_memories_among_many_owners(database_url: str, tmp_path: Path) -> None:
    engine = _engine(database_url, tmp_path / "mem0")
    try:
        # 3,000 memories of 300 other owners, loaded directly...
        rng = random.Random(7)
        rows = []
        for i in range(3000):
            vector = [rng.gauss(0, 1) for _ in range(DIMS)]
            rows.append(
                (
                    str(uuid.uuid4()),
                    str(vector),
                    json.dumps({"user_id": owner_key(f"other-{i % 300}"), "data": f"other {i}"}),
                )
            )
        with psycopg.connect(libpq_url(database_url)) as conn:
            conn.cursor().executemany(f"INSERT INTO {TABLE} (id, vector, payload) VALUES (%s, %s, %s)", rows)
        # ...and five of this owner's, learned through mem0.
        key = owner_key("the-owner")
        batch = [
            pending_source(key, f"note {j}: the parcel is on shelf {j}", T0, source_id=source_id_for(key, str(j)))
            for j in range(5)
        ]
        engine.extract(key, uuid.uuid4().hex, batch)
        # The search is exact over this owner's memories: each of the five is found
        # (first, when asked in its own words), none of the others' ever is.
        mine = {s.text for s in batch}
        for source in batch:
            hits = engine.search(key, source.text or "", limit=10)
            assert hits and hits[0].text == source.text, [h.text for h in hits]
            assert {h.text for h in hits} <= mine
    finally:
        engine.close()
