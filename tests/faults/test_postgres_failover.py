"""A database URL naming two hosts follows a failover without a restart (issue 26,
item 2).

Two PostgreSQL servers stand for a primary and its standby. No replication is
needed to test what memjobs does (it replicates nothing): both get the schema
(the migrations and mem0's table), the "standby" refuses writes
(``default_transaction_read_only``), and the URL is libpq's multi-host form
with ``target_session_attrs=read-write``. Then the primary goes away — first
made read-only under its open connections, later killed (kill -9) — and the
other host is made writable. The same in-process worker
and the same HTTP API (never restarted) keep learning and answering, against
whichever host is writable: each source remembered after a switch is learned
on the new primary, once, and recalled through the API.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from memjobs_client.contracts import owner_key
from memjobs_client.errors import BackendUnavailable
from memjobs_worker.embedded import EmbeddedPostgres
from memjobs_worker.settings import Settings
from tests.support.harness import Harness
from tests.support.http import Api, remember
from tests.support.openai_server import FakeOpenAI
from tests.support.polling import wait_for

pytestmark = [pytest.mark.fault, pytest.mark.slow]


@pytest.fixture
def two_servers() -> Iterator[tuple[EmbeddedPostgres, EmbeddedPostgres]]:
    directory = Path(tempfile.mkdtemp(prefix="memjobs-test-failover-"))
    servers = (EmbeddedPostgres(directory / "a"), EmbeddedPostgres(directory / "b"))
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            if server.alive():
                server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def set_read_only(server: EmbeddedPostgres, read_only: bool) -> None:
    """Make the server refuse (or take) writes, as a demotion (or a promotion)
    would; its open sessions stay open (and read-only from their next transaction)."""
    with psycopg.connect(server.url, autocommit=True) as conn:
        if read_only:
            conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        else:
            conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
        conn.execute("SELECT pg_reload_conf()")


def sources_on(server: EmbeddedPostgres, source_ids: list[str]) -> dict[str, str]:
    with psycopg.connect(server.url) as conn:
        rows = conn.execute("SELECT source_id, state FROM sources WHERE source_id = ANY(%s)", (source_ids,)).fetchall()
    return {str(sid): str(state) for sid, state in rows}


def learn_through(api: Api, owner: str, texts: list[str]) -> list[str]:
    ids = [remember(api, owner, text) for text in texts]
    key = owner_key(owner)

    def learned() -> bool:
        try:
            states = {r.source_id: r.state for r in api.harness.store.list_sources(key)}
        except BackendUnavailable:  # the test's own pool met a connection to the killed host
            return False
        return states == dict.fromkeys(ids, "learned")

    wait_for(learned, 60, f"{owner}'s sources learned")
    return ids


def recalled(api: Api, owner: str, query: str) -> list[list[str]]:
    r = api.post("/v1/recall", {"owner_id": owner, "query": query, "limit": 5})
    assert r.status_code == 200, r.text
    return [hit["source_ids"] for hit in r.json()["memories"]]


def test_workers_and_the_api_follow_the_writable_host_without_a_restart(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    api_factory: Callable[..., Api],
    fake_model: FakeOpenAI,
    two_servers: tuple[EmbeddedPostgres, EmbeddedPostgres],
) -> None:
    a, b = two_servers
    embeddings: dict[str, Any] = {
        "embedding_base_url": fake_model.base_url,
        "embedding_api_key": "k",
        "embedding_dims": 64,
    }
    for server in (a, b):  # the schema on both: migrations and mem0's table
        harness_factory(make_settings(database_url=server.url, **embeddings)).runtime.engine  # noqa: B018
    set_read_only(b, True)  # the standby
    url = f"postgresql://postgres@127.0.0.1:{a.port},127.0.0.1:{b.port}/postgres?target_session_attrs=read-write"
    api = api_factory(settings=make_settings(database_url=url, api_port=0, max_retries=1, **embeddings))

    first = learn_through(api, "ada", ["I grow tomatoes on the balcony"])
    assert sources_on(a, first) == {first[0]: "learned"} and sources_on(b, first) == {}

    # 1. The primary turns read-only under its open connections (the pools hold
    # some: a write refused as read-only must drop them); the standby is promoted.
    set_read_only(a, True)
    set_read_only(b, False)
    second = learn_through(api, "bea", ["我每周六去游泳", "I collect old maps"])
    assert sources_on(b, second) == dict.fromkeys(second, "learned")
    assert sources_on(a, second) == {}
    assert sorted(recalled(api, "bea", "old maps")[:1]) == [[second[1]]]
    assert api.get("/readyz").status_code == 200

    # 2. The new primary dies (kill -9); the old one is writable again.
    set_read_only(a, False)
    b.kill()
    third = learn_through(api, "cy", ["I play the cello badly"])
    assert sources_on(a, third) == {third[0]: "learned"}
    assert recalled(api, "cy", "cello")[:1] == [[third[0]]]
    assert api.get("/readyz").status_code == 200
    dead = {q: s["dead"] for q, s in api.harness.queues().items() if s["dead"]}
    assert not dead, f"dead-lettered during a failover: {dead}"
