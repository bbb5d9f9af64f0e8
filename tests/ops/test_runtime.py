"""The composition root's own contract: the database migrated once, before any
part reads it; closing closes what was built, and builds nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlalchemy.pool import QueuePool

from memjobs_worker.db import migrate
from memjobs_worker.endpoints import Endpoints
from memjobs_worker.runtime import Runtime, producer_client
from memjobs_worker.settings import DatabaseSettings, RedisSettings, Settings

# Nothing listens there: a part that connected would fail the test.
NOWHERE_REDIS = "redis://127.0.0.1:1/0"
NOWHERE_DB = "postgresql://postgres@127.0.0.1:1/nowhere"


def _runtime(tmp_path: Path, redis_url: str, database_url: str) -> Runtime:
    settings = Settings(
        data_dir=tmp_path / "data", redis=RedisSettings(url=redis_url), database=DatabaseSettings(url=database_url)
    )
    return Runtime(
        settings,
        Endpoints(redis_url, database_url),
        producer_client(settings.redis, settings.memory, settings.sessions, settings.knowledge, redis_url=redis_url),
    )


def test_closing_a_runtime_that_built_nothing_builds_nothing_and_twice_is_harmless(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path, NOWHERE_REDIS, NOWHERE_DB)
    runtime.close()
    runtime.close()
    assert not {"redis", "_state_db", "engine", "memory_docs"} & vars(runtime).keys()
    runtime.client.close()


def test_the_database_is_migrated_once_and_disposed_once(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrated: list[Engine] = []

    def counting(engine: Engine, **kwargs: Any) -> None:
        migrated.append(engine)
        migrate(engine, **kwargs)

    monkeypatch.setattr("memjobs_worker.runtime.migrate_db", counting)
    runtime = _runtime(tmp_path, NOWHERE_REDIS, database_url)
    runtime.migrate()
    db = runtime.db
    runtime.store.ping()
    runtime.migrate()
    assert migrated == [db]

    assert isinstance(db.pool, QueuePool)
    assert db.pool.checkedin() == 1  # the ping's connection, kept in the pool
    runtime.close()
    runtime.close()
    assert isinstance(db.pool, QueuePool)  # a fresh pool in place of the disposed one
    assert db.pool.checkedin() == 0  # disposed: its connections closed
    runtime.client.close()
