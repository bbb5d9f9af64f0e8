"""The memory tests' shared fixtures: a hand-moved clock, and a state store
of each kind (the in-memory twin and PostgreSQL) on it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from memjobs_worker.db import create_db_engine
from memjobs_worker.memory.store import InMemoryStateStore, SqlStateStore, StateStore
from tests.support.clocks import T0, ManualClock


@pytest.fixture
def clock() -> ManualClock:
    """Moves only when told, and one millisecond per reading."""
    return ManualClock(T0, step=timedelta(milliseconds=1))


@pytest.fixture(params=["memory", "sql"])
def store(request: pytest.FixtureRequest, clock: ManualClock) -> Iterator[StateStore]:
    if request.param == "memory":
        yield InMemoryStateStore(clock=clock)
        return
    sql = SqlStateStore(create_db_engine(request.getfixturevalue("database_url")), clock=clock)
    yield sql
    sql.close()
