"""Remembers written together (:func:`memjobs_worker.memory.intake.remember_many`):
each gets the outcome it would alone, a request the ledger refuses fails
alone, and an owner's scheduling failing fails only the requests that needed it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest

from memjobs_client.contracts import RememberSource, owner_key, source_id_for
from memjobs_client.errors import BackendUnavailable
from memjobs_worker.memory.intake import remember_many
from memjobs_worker.memory.store import InMemoryStateStore
from memjobs_worker.memory.store.base import AddOutcome
from tests.support.clocks import T0, ManualClock
from tests.support.coordination import Twin

ALICE, BOB = owner_key("alice@example.com"), owner_key("bob@example.com")


def request(key: str, text: str) -> tuple[RememberSource, datetime]:
    return RememberSource(owner_key=key, source_id=source_id_for(key, text), text=text), T0


class Sent(list[str]):
    def __call__(self, actor: str, payload: dict[str, Any], delay_ms: int | None) -> None:
        self.append(payload["owner_key"])


class RefusingStore(InMemoryStateStore):
    """A ledger that refuses any batch, and one text whenever it is written."""

    def add_new_sources(self, requests: Sequence[tuple[RememberSource, datetime]]) -> list[bool]:
        raise ValueError("the batch was refused")

    def add_source(self, payload: RememberSource, *, sent_at: datetime) -> AddOutcome:
        if payload.text == "refused":
            raise ValueError("this one was refused")
        return super().add_source(payload, sent_at=sent_at)


def test_a_request_the_ledger_refuses_fails_alone_and_the_others_are_written_and_scheduled() -> None:
    store = RefusingStore(clock=ManualClock())
    sent = Sent()
    scheduler = Twin().scheduler(sent, lease_ms=30_000, delay_ms=500)
    outcomes = remember_many(
        store, scheduler, [request(ALICE, "kept"), request(ALICE, "refused"), request(BOB, "also kept")]
    )
    assert outcomes[0] == "created" and outcomes[2] == "created"
    assert isinstance(outcomes[1], ValueError)
    assert [r.text for r in store.list_sources(ALICE)] == ["kept"]
    assert sent == [ALICE, BOB]  # each owner once


def test_scheduling_that_fails_fails_the_requests_that_needed_it_and_their_retry_schedules() -> None:
    store = InMemoryStateStore(clock=ManualClock())
    store.add_source(request(BOB, "learned long ago")[0], sent_at=T0)
    attempt = store.begin_attempt(BOB, 1, 10)
    assert attempt is not None
    store.commit_attempt(attempt, [])
    down = Sent()

    def enqueue(actor: str, payload: dict[str, Any], delay_ms: int | None) -> None:
        raise BackendUnavailable("Redis did not answer")

    twin = Twin()
    requests = [request(ALICE, "new"), request(BOB, "learned long ago")]
    outcomes = remember_many(store, twin.scheduler(enqueue, lease_ms=30_000, delay_ms=500), requests)
    # Alice's source is written but her extraction could not be sent: her job
    # fails (and is retried); Bob's duplicate of a learned source needed none.
    assert isinstance(outcomes[0], BackendUnavailable) and outcomes[1] == "duplicate"
    assert [r.state for r in store.list_sources(ALICE)] == ["pending"]
    # The retry: a duplicate still pending, scheduled now.
    assert remember_many(store, twin.scheduler(down, lease_ms=30_000, delay_ms=500), requests[:1]) == ["duplicate"]
    assert down == [ALICE]


def test_an_outage_of_the_ledger_fails_the_whole_batch() -> None:
    class Down(InMemoryStateStore):
        def add_new_sources(self, requests: Sequence[tuple[RememberSource, datetime]]) -> list[bool]:
            raise BackendUnavailable("the database did not answer")

    with pytest.raises(BackendUnavailable):
        remember_many(
            Down(clock=ManualClock()), Twin().scheduler(Sent(), lease_ms=30_000, delay_ms=500), [request(ALICE, "x")]
        )
