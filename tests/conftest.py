"""Session services for the tests: a Redis and a PostgreSQL 16 with pgvector of
their own (started here on free ports, so fault tests can stop them), a fresh
database per test cloned from a migrated template, and the fake model server."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from memjobs_worker.db import create_db_engine, migrate
from memjobs_worker.embedded import EmbeddedPostgres, EmbeddedRedis
from memjobs_worker.settings import Settings
from tests.support.harness import Harness
from tests.support.http import api_factory  # noqa: F401  (fixture of the HTTP API tests)
from tests.support.openai_server import FakeOpenAI

TEMPLATE_DB = "memjobs_template"

for _name in list(os.environ):
    # The tests define their own settings; a developer's shell must not leak in.
    if _name.startswith(("MEMJOBS_", "QWEN_AUDIO_", "DASHSCOPE_", "NOVA_AUDIO_")):
        del os.environ[_name]


@pytest.fixture(scope="session", autouse=True)
def _mem0_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["MEM0_DIR"] = str(tmp_path_factory.mktemp("mem0"))
    os.environ["MEM0_TELEMETRY"] = "False"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[EmbeddedPostgres]:
    # Not under pytest's basetemp: pytest resets pytest-of-<user> to 0700, and
    # running as root the server's own user must be able to traverse the path.
    directory = Path(tempfile.mkdtemp(prefix="memjobs-test-pg-"))
    server = EmbeddedPostgres(directory / "data")
    server.start()
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {TEMPLATE_DB}")
    engine = create_db_engine(_db_url(server, TEMPLATE_DB))
    migrate(engine)
    engine.dispose()
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


def _db_url(server: EmbeddedPostgres, name: str) -> str:
    return f"postgresql://postgres@127.0.0.1:{server.port}/{name}"


@pytest.fixture
def database_url(pg_server: EmbeddedPostgres) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB}")
    yield _db_url(pg_server, name)
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> str:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()  # the test session's own server: nobody else uses it
    client.close()
    return redis_server.url


@pytest.fixture
def fake_model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(embedding_dims=64) as server:
        yield server


@pytest.fixture
def make_settings(tmp_path: Path, redis_url: str, database_url: str) -> Callable[..., Settings]:
    """Settings on the test services with short, test-friendly timings."""

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "redis_url": redis_url,
            "database_url": database_url,
            "data_dir": tmp_path / "data",
            "extract_delay_ms": 20,
            # Micro-batching off: tests that call extract right after remember mean
            # "now"; tests/memory/test_microbatching.py drives it with a clock of its own.
            "extract_max_wait_ms": 0,
            "lease_ms": 3000,
            "min_backoff_ms": 50,
            "max_backoff_ms": 400,
            "max_retries": 30,
            "model_timeout_ms": 5000,
            "model_max_attempts": 2,
            "sweep_pending_after_ms": 0,
            "broker_heartbeat_timeout_ms": 2000,
            "metrics_port": 0,  # any free port; tests that scrape pick one they know
            "heartbeat_interval_ms": 200,
            "heartbeat_ttl_ms": 1000,
        }
        values.update(overrides)
        return Settings(**values)

    return make


@pytest.fixture
def model_settings(make_settings: Callable[..., Settings],
                   fake_model: FakeOpenAI) -> Callable[..., Settings]:
    """Settings whose light model is the fake server (extraction with infer=True)."""

    def make(**overrides: Any) -> Settings:
        values = {"memory_base_url": fake_model.base_url, "memory_api_key": "test-key",
                  "memory_model": "fake-flash"}
        values.update(overrides)
        return make_settings(**values)

    return make


@pytest.fixture
def harness_factory() -> Iterator[Callable[[Settings], Harness]]:
    made: list[Harness] = []

    def make(settings: Settings) -> Harness:
        h = Harness(settings)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()
