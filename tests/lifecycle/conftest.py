"""An owner's data in every store, and a second database for imports."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from memjobs_client.contracts import BlackboardEntry, TaskRef, owner_key
from memjobs_worker.embedded import EmbeddedPostgres
from memjobs_worker.knowledge.chunking import chunk_hash
from memjobs_worker.knowledge.store import StoredChunk
from memjobs_worker.sessions.memory_docs.protocol import ChangeContext
from tests.conftest import TEMPLATE_DB
from tests.support.harness import Harness

CONTEXT = ChangeContext("test")


@dataclass(frozen=True)
class Planted:
    """What :func:`plant` put in the stores for one owner."""

    owner: str
    key: str
    tag: str  # a word that appears in every text of the owner, and nowhere else
    sources: tuple[str, ...]  # texts remembered (queued, not yet learned)

    @property
    def needles(self) -> list[str]:
        """What must be found nowhere once the owner is erased."""
        return [self.owner, self.key, self.tag]


def plant(h: Harness, owner: str, tag: str) -> Planted:
    """Queue two remembers of ``owner`` and write a document, a digest, a task, a
    session run, a blackboard entry, a knowledge document and (through the memory
    service) audit rows: every text carries ``tag``."""
    key = owner_key(owner)
    texts = (f"{tag} likes hiking in the high mountains", f"the sister of {tag} lives in Lyon")
    for text in texts:
        h.client.remember(owner, text)
    docs = h.runtime.memory_docs
    docs.append(owner, "USER.md", f"- call me {tag}", context=CONTEXT)
    docs.append(owner, "MEMORY.md", f"- {tag} prefers green tea", context=CONTEXT)
    sessions = h.runtime.sessions
    sessions.save_digest(
        key,
        "s-1",
        f"moving house for {tag}",
        f"{tag} asked about movers",
        [TaskRef(task_id="t-1", goal=f"book movers for {tag}")],
    )
    sessions.record_task(key, "t-1", f"book movers for {tag}", "running")
    sessions.runs.claim(key, "s-1", "consolidate", timedelta(minutes=1))
    h.runtime.blackboard.append(
        key,
        "s-1",
        [
            BlackboardEntry(
                entry_id="e-1", seq=1, at=datetime.now(UTC), trust="user", result=f"{tag} wants the window seat"
            )
        ],
    )
    note = f"{tag} keeps the garden notes here: tomatoes in May"
    h.runtime.knowledge.put_document(
        key, "notes", f"garden of {tag}", "doc:notes", "h-1", [StoredChunk(0, note, chunk_hash(note), None)]
    )
    return Planted(owner, key, tag, texts)


@pytest.fixture
def second_database_url(pg_server: EmbeddedPostgres) -> Iterator[str]:
    """Another migrated database on the session's server (another stack's)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB}")
    yield f"postgresql://postgres@127.0.0.1:{pg_server.port}/{name}"
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
