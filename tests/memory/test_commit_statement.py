"""A batch whose sources are all still pending commits in one statement (one
round trip, where the transaction takes four); one with a source forgotten
meanwhile goes through the transaction, which decides source by source."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from memjobs_client.contracts import RememberSource, owner_key, source_id_for
from memjobs_worker.db import create_db_engine
from memjobs_worker.memory.store import Produced
from memjobs_worker.memory.store.sql import SqlStateStore
from tests.support.clocks import T0

KEY = owner_key("alice")


@pytest.fixture
def store(database_url: str) -> Iterator[SqlStateStore]:
    sql = SqlStateStore(create_db_engine(database_url))
    yield sql
    sql.close()


def remember(store: SqlStateStore, text: str) -> str:
    sid = source_id_for(KEY, text)
    assert store.add_source(RememberSource(owner_key=KEY, source_id=sid, text=text), sent_at=T0) == "created"
    return sid


def statements(store: SqlStateStore) -> list[str]:
    """Each statement sent to the server from now on (an autocommit connection's
    statement is atomic alone; the transaction adds its BEGIN and COMMIT)."""
    sent: list[str] = []

    def on_statement(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", on_statement)
    return sent


def test_a_batch_still_pending_commits_in_one_statement(store: SqlStateStore) -> None:
    a, b = remember(store, "I keep the bicycle in the shed"), remember(store, "tea at four")
    attempt = store.begin_attempt(KEY, 1, 10)
    assert attempt is not None
    sent = statements(store)
    result = store.commit_attempt(attempt, [Produced("m1", (a, b)), Produced("m2", (b,))])
    assert len(sent) == 1
    assert (sorted(result.learned), result.discarded, result.still_pending) == (sorted([a, b]), [], [])
    assert store.learned_provenance(KEY) == {"m1": sorted([a, b]), "m2": [b]}
    assert [e[3] for e in store.attempt_events(KEY)] == ["committed"]


def test_a_batch_with_a_source_forgotten_meanwhile_goes_through_the_transaction(store: SqlStateStore) -> None:
    doomed, kept = remember(store, "my old address"), remember(store, "walks the dog")
    attempt = store.begin_attempt(KEY, 1, 10)
    assert attempt is not None
    store.forget(KEY, doomed, sent_at=T0)
    sent = statements(store)
    result = store.commit_attempt(attempt, [Produced("shared", (doomed, kept))])
    # The one statement wrote nothing but the token; the transaction (two
    # statements more) discarded the memory.
    assert len(sent) == 3
    assert (result.learned, result.discarded, result.still_pending) == ([], ["shared"], [kept])
    assert store.tombstones(KEY) == ["shared"]
    assert store.learned_provenance(KEY) == {}
    assert {r.source_id: r.state for r in store.list_sources(KEY)} == {doomed: "forgotten", kept: "pending"}
