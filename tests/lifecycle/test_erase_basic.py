"""An erasure: twice, resumed after stopping between stores, the counts it leaves."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from memjobs_client.errors import BackendUnavailable
from memjobs_worker.lifecycle import EraseIncomplete, Owner, OwnerPart, erase_owner, erasures, owner_parts
from memjobs_worker.settings import Settings
from tests.lifecycle.conftest import plant
from tests.support.harness import Harness
from tests.support.leaks import files_holding, redis_keys_holding, tables_holding
from tests.support.openai_server import FakeOpenAI, echo_facts_handler


def _erase(h: Harness, owner: str, parts: list[OwnerPart] | None = None) -> dict[str, int]:
    rt = h.runtime
    report = erase_owner(
        Owner.of(owner),
        parts or owner_parts(rt),
        redis_client=rt.redis,
        db=rt.db,
        hold_ms=h.settings.lifecycle.erase_hold_ms,
    )
    return report.counts


def test_an_erasure_run_twice_finds_nothing_the_second_time(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    h = harness_factory(make_settings())
    alice = plant(h, "alice@example.com", "Qalicetag")
    h.start_worker()
    h.drain()

    first = _erase(h, alice.owner)
    second = _erase(h, alice.owner)

    assert first["sources"] >= 2 and first["memories"] >= 2 and first["memory_documents"] == 2
    assert first["sessions"] == 3 and first["knowledge"] == 2 and first["memory_audit"] == 2
    assert set(second.values()) == {0}
    assert tables_holding(str(h.settings.database.url), alice.needles) == []
    assert redis_keys_holding(h.runtime.redis, alice.needles) == []
    assert files_holding([h.settings.data_dir], alice.needles) == []
    # What stays: the counts, no owner (the needle search above covers the table).
    assert [r["counts"] for r in erasures(h.runtime.db)] == [second, first]


def test_an_erasure_that_cannot_wait_for_a_running_job_stops_before_any_store(
    model_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI,
) -> None:
    """The owner's extraction is in the model's hands: with no time to wait, the
    erasure stops (``erase_incomplete``) before it touches a store; run again
    once the job ends, it finishes."""
    fake_model.set_chat_handler(echo_facts_handler)
    fake_model.hang_next("chat")
    h = harness_factory(model_settings(model_timeout_ms=60_000))
    alice = plant(h, "alice@example.com", "Qalicetag")
    h.start_worker()
    fake_model.wait_for_request("chat", 1)

    with pytest.raises(EraseIncomplete):
        _erase(h, alice.owner, owner_parts(h.runtime, wait_ms=0))
    assert len(h.store.list_sources(alice.key)) == 2, "a store was touched"

    fake_model.release()
    _erase(h, alice.owner)  # waits for the extraction, then erases what it wrote
    assert tables_holding(str(h.settings.database.url), alice.needles) == []


class _Interrupted(OwnerPart):
    """Stands for a process killed between two stores."""

    name = "interrupted"

    def erase(self, owner: Owner) -> int:
        raise BackendUnavailable("the process died here")


def test_an_erasure_stopped_between_stores_is_finished_by_running_it_again(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    h = harness_factory(make_settings())
    alice = plant(h, "alice@example.com", "Qalicetag")
    bob = plant(h, "bob@example.com", "Qbobtag")
    h.start_worker()
    h.drain()
    parts = owner_parts(h.runtime)
    halfway = len(parts) // 2

    with pytest.raises(BackendUnavailable):
        _erase(h, alice.owner, [*parts[:halfway], _Interrupted(), *parts[halfway:]])
    assert tables_holding(str(h.settings.database.url), alice.needles), "nothing was left to finish"
    assert h.runtime.store.list_sources(alice.key) == []  # the parts before the stop did run

    _erase(h, alice.owner)

    assert tables_holding(str(h.settings.database.url), alice.needles) == []
    assert files_holding([h.settings.data_dir], alice.needles) == []
    unfinished, finished = erasures(h.runtime.db)[::-1]
    assert unfinished["finished_at"] is None and finished["finished_at"] is not None
    assert tables_holding(str(h.settings.database.url), bob.needles), "bob was erased too"
    assert len(h.runtime.store.list_sources(bob.key)) == 2
