"""Writing the ledger directly, as the remember job would."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from memjobs_client.contracts import RememberSource, source_id_for
from memjobs_worker.db.connect import libpq_url
from memjobs_worker.memory.engine import HashingEmbedder
from memjobs_worker.memory.store import SourceRecord
from tests.support.harness import Harness


def pending_source(key: str, text: str | None, at: datetime, *, source_id: str | None = None) -> SourceRecord:
    """A pending utterance of owner ``key``, in no session, made and last updated
    at ``at``; its id is ``source_id``, else the one the client gives ``text``."""
    sid = source_id or source_id_for(key, text or "")
    return SourceRecord(sid, key, "pending", "utterance", None, text, at, at, None)


def remember_now(h: Harness, key: str, text: str) -> str:
    """Do the remember job's work here, in the test (the source added to the
    ledger and the owner's extraction scheduled, as the job does), so the ledger
    holds a whole batch before any worker runs. Returns the source id.

    ``key`` is the owner key (:func:`memjobs_client.contracts.owner_key`).
    """
    sid = source_id_for(key, text)
    h.pipeline.remember(RememberSource(owner_key=key, source_id=sid, text=text), sent_at=datetime.now(UTC))
    return sid


def hashing_mem0_engine(database_url: str, data_dir: Path, dims: int):  # type: ignore[no-untyped-def]
    """mem0's engine on ``database_url`` with the hashed embedder of ``dims``
    dimensions and no chat model (sources stored verbatim): the vector store's
    own tests, with nothing to stand in for."""
    from memjobs_worker.memory.engine.mem0_engine import Mem0Engine

    return Mem0Engine(
        database_url=libpq_url(database_url),
        data_dir=data_dir,
        dims=dims,
        embedder=HashingEmbedder(dims),
        chat=None,
        min_score=0.0,
    )
