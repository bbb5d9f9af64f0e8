"""The ledger's fencing check on PostgreSQL, and the sweep through a harness.

The lease itself (tokens, floors, renewal, release outcomes, expiry, a holder
cut off from Redis) is held to one contract on Redis and on its twin:
``test_lease_contract.py``; the sweep's skipping of held leases and scheduled
owners: ``test_scheduler_contract.py``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from memjobs_client.contracts import RememberSource, owner_key, source_id_for
from memjobs_client.errors import StaleFencingToken
from memjobs_worker.memory.intake import sweep
from memjobs_worker.memory.store.sql import SqlStateStore
from memjobs_worker.settings import Settings
from tests.support.harness import Harness

KEY = owner_key("bob")


def test_the_store_refuses_a_stale_holders_commit(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(make_settings())
    text = "I keep the spare key under the blue pot"
    h.store.add_source(
        RememberSource(owner_key=KEY, source_id=source_id_for(KEY, text), text=text),
        sent_at=datetime.now(UTC),
    )
    stale = h.store.begin_attempt(KEY, 1, 10)
    assert stale is not None
    newer = h.store.begin_attempt(KEY, 2, 10)  # a newer holder was seen
    assert newer is not None
    with pytest.raises(StaleFencingToken):
        h.store.commit_attempt(stale, [])
    assert [r.state for r in h.store.list_sources(KEY)] == ["pending"]
    h.store.commit_attempt(newer, [])
    assert [r.state for r in h.store.list_sources(KEY)] == ["learned"]


def test_sweeper_requeues_only_owners_pending_past_the_threshold(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(make_settings(extract_delay_ms=0))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    store = SqlStateStore(h.store.engine, clock=lambda: t0)
    text = "remind me about the dentist"
    store.add_source(RememberSource(owner_key=KEY, source_id=source_id_for(KEY, text), text=text), sent_at=t0)
    threshold_ms = 60_000
    assert sweep(store, h.runtime.scheduler, t0 + timedelta(seconds=59), threshold_ms) == 0
    assert h.queues()["memjobs_extract"]["ready"] == 0
    assert sweep(store, h.runtime.scheduler, t0 + timedelta(seconds=61), threshold_ms) == 1
    assert h.queues()["memjobs_extract"]["ready"] == 1
