"""Session services for the tests: a Redis and a PostgreSQL 16 with pgvector of
their own (started here on free ports, so fault tests can stop them), a fresh
database per test cloned from a migrated template, and the fake model server.

Markers: ``slow`` (starts processes: workers, the CLI; or an embedded stack), ``fault``
(kills or stops servers, partitions hosts) and ``server_free``, which is not
written by hand: every test that is neither slow nor a fault and needs neither
session server (``redis_server``, ``pg_server``, directly or through another
fixture) gets it. ``pytest --server-free`` (``make test-fast``) runs only those,
and refuses any server: the session fixtures, ``EmbeddedRedis.start`` and
``EmbeddedPostgres.start`` fail the test that reaches them, so nothing in the
fast set can start Redis or PostgreSQL without failing loudly. A test whose
fixtures fetch others by name at run time (``request.getfixturevalue``) cannot
be judged before it runs and is left to ``make test``.
"""

from __future__ import annotations

import inspect
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
from tests.support.harness import Harness, kill_group
from tests.support.http import api_factory, api_process_factory  # noqa: F401  (fixtures of the HTTP API tests)
from tests.support.openai_server import FakeOpenAI
from tests.support.settings import build as build_settings

TEMPLATE_DB = "memjobs_template"

#: The session fixtures that start a server; a test needing one is not server-free.
SERVER_FIXTURES = frozenset({"redis_server", "pg_server"})
MARKERS = (
    "slow: starts processes (workers, the CLI) or an embedded stack",
    "fault: kills or stops servers, partitions hosts",
    "server_free: needs no Redis, PostgreSQL or worker process (set by conftest; "
    "`pytest --server-free` runs only these)",
)

for _name in list(os.environ):
    # The tests define their own settings; a developer's shell must not leak in.
    if _name.startswith(("MEMJOBS_", "QWEN_AUDIO_", "DASHSCOPE_", "NOVA_AUDIO_")):
        del os.environ[_name]
# The hashed embedder unless a test asks for the local model (local_embedder="e5"):
# deterministic and free, where the model costs a load per process and ~10 ms a
# text (docs/embeddings.md, "In the tests"). Workers and the CLI inherit it.
os.environ["MEMJOBS_LOCAL_EMBEDDER"] = "hashing"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--server-free",
        action="store_true",
        default=False,
        help="run only the tests that need no server (no Redis, no PostgreSQL, "
        "no worker process); starting one fails the test",
    )


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


def _fetches_by_name(fixturedef: Any, seen: dict[object, bool]) -> bool:
    func = fixturedef.func
    if func not in seen:
        try:
            seen[func] = "getfixturevalue" in inspect.getsource(func)
        except (OSError, TypeError):
            seen[func] = False
    return seen[func]


def _needs_server(item: pytest.Item, seen: dict[object, bool]) -> bool:
    if item.get_closest_marker("slow") or item.get_closest_marker("fault"):
        return True
    if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(_fetches_by_name(d, seen) for chain in defs for d in chain)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects on the marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seen: dict[object, bool] = {}
    needing = [item for item in items if _needs_server(item, seen)]
    needing_ids = {id(item) for item in needing}
    for item in items:
        if id(item) not in needing_ids:
            item.add_marker(pytest.mark.server_free)
    if config.getoption("--server-free") and needing:
        config.hook.pytest_deselected(items=needing)
        items[:] = [item for item in items if id(item) not in needing_ids]


def _refuse_in_server_free_run(config: pytest.Config, what: str) -> None:
    if config.getoption("--server-free"):
        pytest.fail(
            f"{what} in a --server-free run (make test-fast): this test needs a "
            f"server; mark it or run it with `make test`",
            pytrace=False,
        )


@pytest.fixture(scope="session", autouse=True)
def _no_servers_in_a_server_free_run(request: pytest.FixtureRequest) -> Iterator[None]:
    """Under ``--server-free``, starting an embedded Redis or PostgreSQL fails the test."""
    if not request.config.getoption("--server-free"):
        yield
        return

    def refuse(what: str) -> Callable[..., Any]:
        def start(*_: Any, **__: Any) -> Any:
            _refuse_in_server_free_run(request.config, f"{what} was started")

        return start

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(EmbeddedRedis, "start", refuse("Redis"))
        patch.setattr(EmbeddedPostgres, "start", refuse("PostgreSQL"))
        yield


@pytest.fixture(scope="session", autouse=True)
def _mem0_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["MEM0_DIR"] = str(tmp_path_factory.mktemp("mem0"))
    os.environ["MEM0_TELEMETRY"] = "False"


@pytest.fixture(scope="session")
def redis_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    _refuse_in_server_free_run(request.config, "the session's Redis was asked for")
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_server(request: pytest.FixtureRequest) -> Iterator[EmbeddedPostgres]:
    _refuse_in_server_free_run(request.config, "the session's PostgreSQL was asked for")
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
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A Redis of the test's own, to fill or stop without touching the session's."""
    server = EmbeddedRedis(tmp_path / "own-redis")
    server.start()
    yield server
    server.stop()


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
            # Knowledge is opt-in (off by default): most tests use it, so it is on here;
            # tests of the default pass knowledge="off" (tests/knowledge/test_knowledge_off.py).
            "knowledge": "on",
        }
        values.update(overrides)
        return build_settings(**values)

    return make


@pytest.fixture
def model_settings(make_settings: Callable[..., Settings], fake_model: FakeOpenAI) -> Callable[..., Settings]:
    """Settings whose light model is the fake server (extraction with infer=True)."""

    def make(**overrides: Any) -> Settings:
        values = {"memory_base_url": fake_model.base_url, "memory_api_key": "test-key", "memory_model": "fake-flash"}
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


@pytest.fixture
def procs() -> Iterator[list[Any]]:
    """Worker processes a test starts (``spawn_workers``): their process groups
    are killed when the test ends, whatever happened."""
    made: list[Any] = []
    yield made
    for proc in made:
        kill_group(proc)
