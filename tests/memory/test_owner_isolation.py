"""No owner's text crosses to another owner (issue 21, finding 1).

Source ids are a public function of (owner, text), so anyone who knows an
owner id and guesses a text can compute the id of that owner's source. The
attack: alice forgets the id of carol's text before carol remembers it; carol
then remembers it. Keyed by id alone, alice's forget left a forgotten marker
under alice, carol's remember revived it (text and all) under alice, and
carol's own ledger stayed empty. The ledger is now keyed by (owner, source id):
every door answers ``not_found`` for an id the owner does not have, a forget
decided by the worker (a gateway with no ledger, a forged or replayed job)
writes only under its own owner, and carol's source is hers and learned.

The ledger's half runs on both stores (the in-memory twin must agree); the
doors' half runs the HTTP API, the CLI, a door's personal memory, a gateway's
client (no ledger: the worker decides), and jobs put straight onto the queue,
against real Redis and PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from dramatiq import Message

from memjobs_client import ForgetOutcome
from memjobs_client.contracts import (
    ACTOR_FORGET,
    QUEUE_FORGET,
    RememberSource,
    owner_key,
    source_id_for,
)
from memjobs_worker.cli import exits
from memjobs_worker.db import create_db_engine, migrate
from memjobs_worker.embedded import EmbeddedPostgres
from memjobs_worker.memory.store import Produced, SqlStateStore, StateStore
from tests.support.cli import cli_env, run_cli
from tests.support.clocks import T0
from tests.support.http import Api, forget_at_every_door, remember

ALICE, CAROL = "alice@example.com", "carol@example.com"
A, C = owner_key(ALICE), owner_key(CAROL)
SECOND = timedelta(seconds=1)


# -- the ledger: both stores ------------------------------------------------------------


def add(store: StateStore, key: str, text: str, sent_at: datetime, sid: str | None = None) -> str:
    return store.add_source(
        RememberSource(owner_key=key, source_id=sid or source_id_for(key, text), text=text), sent_at=sent_at
    )


def ledger(store: StateStore, key: str) -> dict[str, tuple[str, str | None]]:
    return {r.source_id: (r.state, r.text) for r in store.list_sources(key)}


def texts_of(store: StateStore, key: str) -> set[str]:
    return {r.text for r in store.list_sources(key) if r.text is not None}


@pytest.mark.parametrize("carol_sent", [T0 + SECOND, T0 - SECOND], ids=["after", "before"])
def test_another_owners_forget_that_comes_first_neither_takes_nor_swallows_the_source(
    store: StateStore, carol_sent: datetime
) -> None:
    """The attack of finding 1, on the ledger: alice's forget of carol's id, then
    carol's remember (sent after alice's forget, or before it and delivered late)."""
    text = "carol's spare key is under the lilac pot"
    sid = source_id_for(C, text)
    assert store.forget(A, sid, sent_at=T0).found is False
    assert add(store, C, text, carol_sent) == "created"
    assert ledger(store, C) == {sid: ("pending", text)}
    assert text not in texts_of(store, A)
    # Alice's forget left a marker in her own ledger only: no text, nothing of carol's.
    assert (store.source_state(C, sid), store.source_state(A, sid)) == ("pending", "forgotten")
    assert ledger(store, A) == {sid: ("forgotten", None)}
    assert store.source_state(A, source_id_for(A, text)) is None
    # Carol's source is learned as hers; alice has no memory of it.
    attempt = store.begin_attempt(C, 1, 10)
    assert attempt is not None and [s.source_id for s in attempt.sources] == [sid]
    assert store.commit_attempt(attempt, [Produced("m-carol", (sid,))]).learned == [sid]
    assert store.learned_provenance(C) == {"m-carol": [sid]}
    assert store.learned_provenance(A) == {}
    assert store.begin_attempt(A, 1, 10) is None  # nothing of alice's to learn
    # Alice's forget of it, again, after it is learned: still nothing of carol's changes.
    assert store.forget(A, sid, sent_at=T0 + 5 * SECOND).memory_ids == []
    assert ledger(store, C) == {sid: ("learned", text)}
    assert store.tombstones(A) == [] and store.tombstones(C) == []


def test_a_forget_that_races_ahead_of_its_own_owners_remember_still_wins(store: StateStore) -> None:
    text = "the safe is behind the painting"
    sid = source_id_for(C, text)
    store.forget(C, sid, sent_at=T0)
    assert add(store, C, text, T0 - SECOND) == "forgotten"  # sent before the forget: it wins
    assert ledger(store, C) == {sid: ("forgotten", None)}
    assert add(store, C, text, T0 + SECOND) == "revived"  # said again after: remembered again
    assert ledger(store, C) == {sid: ("pending", text)}


def test_two_owners_with_one_source_id_are_two_rows(store: StateStore) -> None:
    """A crafted remember may claim another owner's id for its own text: it gets a
    row of its own, and what one owner does to it never reaches the other's."""
    theirs = "carol takes the 7:40 train"
    sid = source_id_for(C, theirs)
    assert add(store, C, theirs, T0) == "created"
    assert add(store, A, "alice's own words", T0, sid=sid) == "created"
    for key, memory in ((C, "m-c"), (A, "m-a")):
        attempt = store.begin_attempt(key, 1, 10)
        assert attempt is not None
        store.commit_attempt(attempt, [Produced(memory, (sid,))])
    forgotten = store.forget(A, sid, sent_at=T0 + SECOND)
    assert (forgotten.found, forgotten.memory_ids) == (True, ["m-a"])
    assert ledger(store, A) == {sid: ("forgotten", None)}
    assert ledger(store, C) == {sid: ("learned", theirs)}
    assert (store.source_state(A, sid), store.source_state(C, sid)) == ("forgotten", "learned")
    assert store.learned_provenance(C) == {"m-c": [sid]} and store.learned_provenance(A) == {}
    assert (store.tombstones(A), store.tombstones(C)) == (["m-a"], [])
    # A failed batch of one owner fails only that owner's row.
    assert add(store, A, "alice's own words", T0 + 2 * SECOND, sid=sid) == "revived"
    attempt = store.begin_attempt(A, 2, 10)
    assert attempt is not None
    assert store.fail_attempt(attempt, "model_output_invalid: test") == [sid]
    assert ledger(store, C) == {sid: ("learned", theirs)}


# -- the migration: data from before, rows the bug crossed repaired ---------------------------


@pytest.fixture
def old_database(pg_server: EmbeddedPostgres) -> Iterator[sa.Engine]:
    """A database migrated to the revision before the owner-keyed ledger."""
    from alembic import command

    from memjobs_worker.db.migrate import _config

    name = f"m_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    engine = create_db_engine(f"postgresql://postgres@127.0.0.1:{pg_server.port}/{name}")
    with engine.connect() as conn:
        command.upgrade(_config(conn), "0005_failed_sources")
        conn.commit()
    yield engine
    engine.dispose()
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_the_migration_keeps_the_ledger_and_repairs_rows_the_bug_crossed(old_database: sa.Engine) -> None:
    kept, crossed, shared = "alice likes oolong", "carol's locker is by the pool", "alice swims"
    rows = [
        # (owner, source id, state, text): alice's own, carol's text revived under alice
        # (the bug), and alice's source that shared a memory with it.
        (A, source_id_for(A, kept), "learned", kept),
        (A, source_id_for(C, crossed), "learned", crossed),
        (A, source_id_for(A, shared), "learned", shared),
        (C, source_id_for(C, "a marker"), "forgotten", None),
    ]
    with old_database.begin() as conn:
        for key, sid, state, text in rows:
            conn.execute(
                sa.text(
                    "INSERT INTO sources (source_id, owner_key, state, kind, text, created_at, updated_at) "
                    "VALUES (:sid, :key, :state, 'utterance', :text, now(), now())"
                ),
                {"sid": sid, "key": key, "state": state, "text": text},
            )
        for memory, sid in (("m1", rows[0][1]), ("m2", rows[1][1]), ("m2", rows[2][1])):
            conn.execute(
                sa.text("INSERT INTO provenance (memory_id, source_id, owner_key) VALUES (:m, :sid, :key)"),
                {"m": memory, "sid": sid, "key": A},
            )
    migrate(old_database)
    store = SqlStateStore(old_database)
    assert ledger(store, A) == {
        rows[0][1]: ("learned", kept),
        rows[1][1]: ("forgotten", None),
        rows[2][1]: ("pending", shared),
    }  # learned again, without carol's
    assert ledger(store, C) == {rows[3][1]: ("forgotten", None)}
    assert store.learned_provenance(A) == {"m1": [rows[0][1]]}
    assert store.tombstones(A) == ["m2"]  # the memory made with carol's text is deleted next


# -- every door, against real Redis and PostgreSQL --------------------------------------------


def forged_forget(api: Api, key: str, source_id: str) -> None:
    """A forget job put straight onto the queue, as a replay or a forgery would be."""
    api.harness.client.broker.enqueue(
        Message(
            queue_name=QUEUE_FORGET,
            actor_name=ACTOR_FORGET,
            args=({"schema_version": 1, "owner_key": key, "source_id": source_id},),
            kwargs={},
            options={},
        )
    )


def test_no_door_lets_one_owner_forget_into_or_read_out_of_another(
    api_factory: Callable[..., Api], tmp_path: Path
) -> None:
    api = api_factory(worker=False)
    h = api.harness
    env = cli_env(
        tmp_path / "cli", MEMJOBS_REDIS_URL=str(h.settings.redis.url), MEMJOBS_DATABASE_URL=str(h.settings.database.url)
    )
    carols = {
        "queued": "carol's gate code hint is her cat's birthday",
        "no_ledger": "carol keeps the passport in the blue folder",
        "forged": "carol's bike lock is the red one by the door",
    }
    ids = {k: source_id_for(C, t) for k, t in carols.items()}

    # Carol's remember is queued (no worker yet): alice's forget of its id is
    # not_found at every door (her own remember could race so; carol's cannot).
    assert remember(api, CAROL, carols["queued"]) == ids["queued"]
    assert forget_at_every_door(api, env, ALICE, ids["queued"]) == {
        "http": (404, "not_found"),
        "cli": (exits.NOT_FOUND, "not_found"),
        "client": ForgetOutcome(ids["queued"], "not_found", None),
    }
    # Before carol says the others: a gateway client (no ledger: the worker
    # decides) and a forged job on the queue forget them for alice.
    assert h.client.forget(ALICE, ids["no_ledger"]) == ForgetOutcome(ids["no_ledger"], "queued", "queued")
    forged_forget(api, A, ids["forged"])
    h.start_worker()
    h.drain()
    # Carol says them after; once learned, alice's forgets are replayed for all three.
    for name in ("no_ledger", "forged"):
        assert remember(api, CAROL, carols[name]) == ids[name]
    h.drain()
    for sid in ids.values():
        forged_forget(api, A, sid)
    mine = remember(api, ALICE, "alice grows basil on the balcony")
    h.drain()

    # Carol's sources are hers, learned, and recalled; alice sees none of them anywhere.
    listed = api.get("/v1/sources", owner=CAROL, params={"include_text": "true"}).json()["sources"]
    assert {s["source_id"]: (s["state"], s["text"]) for s in listed} == {ids[k]: ("learned", carols[k]) for k in carols}
    assert {m["text"] for m in api.get("/v1/memories", owner=CAROL).json()["memories"]} == set(carols.values())
    assert api.post("/v1/recall", {"owner_id": CAROL, "query": carols["forged"], "limit": 10}).json()["memories"]
    alices = api.get("/v1/sources", owner=ALICE, params={"include_text": "true"}).json()["sources"]
    assert {s["text"] for s in alices if s["text"] is not None} == {"alice grows basil on the balcony"}
    assert [s["state"] for s in alices if s["source_id"] == mine] == ["learned"]
    memories = api.get("/v1/memories", owner=ALICE).json()["memories"]
    assert [m["text"] for m in memories] == ["alice grows basil on the balcony"]
    for text in carols.values():
        recalled = api.post("/v1/recall", {"owner_id": ALICE, "query": text, "limit": 50}).json()
        assert {m["text"] for m in recalled["memories"]} <= {"alice grows basil on the balcony"}
        assert not set(ids.values()) & {s for m in recalled["memories"] for s in m["source_ids"]}
    cli = run_cli(env, "sources", "--owner", ALICE, "--show-text", "--json")
    assert cli.code == exits.OK and {s["text"] for s in cli.json()} >= {"alice grows basil on the balcony"}
    assert not any(text in cli.stdout for text in carols.values())
