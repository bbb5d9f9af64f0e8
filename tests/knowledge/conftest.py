"""The knowledge tests' shared fixture: an engine on a fresh database whose
knowledge tables are migrated."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from memjobs_worker.db import create_db_engine
from memjobs_worker.knowledge import ensure_schema


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    eng = create_db_engine(database_url)
    ensure_schema(eng)
    yield eng
    eng.dispose()
