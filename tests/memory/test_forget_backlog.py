"""A forget is decided exactly, and at the same cost, whatever the backlog (issue 30, item 1).

Finding: with the remember workers paused, 3,000 remembers of one owner queued,
then 100 of them forgotten through ``POST /v1/forget``: 34 answered
``not_found``, and once the workers resumed those 34 sources were learned. A
forget decided "queued" by scanning Dramatiq's stored messages, at most 2,000
per hash, in no particular order; every forget paid that scan. Now each
remember is counted under (sha256(owner), source id) as it is enqueued
(:mod:`memjobs_client.queued`) and a forget reads that one key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
import redis

from memjobs_client import ForgetOutcome
from memjobs_client.contracts import ACTOR_REMEMBER, QUEUE_REMEMBER, owner_key, source_id_for
from memjobs_worker.broker import SCAN_LIMIT, scan_messages
from memjobs_worker.runtime import Runtime, open_door
from memjobs_worker.settings import Settings
from tests.support.harness import Harness
from tests.support.redis_commands import WALKS, fewest_commands_of

OWNER = "frank@example.com"
KEY = owner_key(OWNER)
BACKLOG = 3_000


def text(i: int) -> str:
    return f"backlog fact {i}: the spare charger is in drawer {i % 9}"


@pytest.fixture
def door(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> Iterator[tuple[Harness, Runtime]]:
    """A harness with no worker consuming (the backlog stays queued) and a door's runtime."""
    h = harness_factory(make_settings())
    runtime = open_door(h.settings, h.endpoints)
    yield h, runtime
    runtime.close()
    runtime.client.close()


def queue_backlog(h: Harness, start: int, count: int) -> list[str]:
    return [h.client.remember(OWNER, text(i)) for i in range(start, start + count)]


def scanned_source_ids(client: redis.Redis) -> set[str]:
    """The remember sources the old decision could see: its scan of at most
    SCAN_LIMIT stored messages per hash."""
    seen = set()
    for queue, raw in scan_messages(client, SCAN_LIMIT):
        message = json.loads(raw)
        if queue == QUEUE_REMEMBER and message["actor_name"] == ACTOR_REMEMBER:
            seen.add(message["args"][0]["source_id"])
    return seen


def spread(ids: list[str], n: int) -> list[str]:
    step = len(ids) / n
    return [ids[int(i * step)] for i in range(n)]


def test_every_forget_of_a_queued_remember_is_honoured_at_a_backlog_of_thousands(
    door: tuple[Harness, Runtime],
) -> None:
    h, runtime = door
    ids = queue_backlog(h, 0, BACKLOG)
    assert h.queues()[QUEUE_REMEMBER]["ready"] == BACKLOG
    # Half of the forgotten are sources a 2,000-message scan would not have seen.
    seen = scanned_source_ids(runtime.redis)
    unseen = [sid for sid in ids if sid not in seen]
    assert len(unseen) >= BACKLOG - SCAN_LIMIT
    doomed = spread(unseen, 50) + spread([sid for sid in ids if sid in seen], 50)
    assert len(set(doomed)) == 100

    outcomes = [runtime.personal_memory.forget(OWNER, sid) for sid in doomed]
    never_sent = source_id_for(KEY, "never said")

    assert outcomes == [ForgetOutcome(sid, "forgotten", "queued") for sid in doomed]
    assert runtime.personal_memory.forget(OWNER, never_sent) == ForgetOutcome(never_sent, "not_found", None)
    # Another owner's forget of one of these ids is not_found: the count is the owner's own.
    assert runtime.personal_memory.forget("mallory@example.com", ids[0]).status == "not_found"

    h.start_worker(threads=4)
    h.drain(timeout_s=600)
    states = {r.source_id: r.state for r in h.store.list_sources(KEY)}
    assert {sid: states[sid] for sid in doomed} == {sid: "forgotten" for sid in doomed}
    assert sum(state == "learned" for state in states.values()) == BACKLOG - len(doomed)
    learned_from = {sid for hit in h.pipeline.memories(KEY) for sid in hit.source_ids}
    assert learned_from.isdisjoint(doomed)
    assert never_sent not in states


def test_a_forget_issues_the_same_few_redis_commands_at_any_backlog(door: tuple[Harness, Runtime]) -> None:
    h, runtime = door
    runtime.client.broker.maintenance_chance = 0  # Dramatiq's random housekeeping: not the forget's
    ids = queue_backlog(h, 0, 4)
    runtime.personal_memory.forget(OWNER, ids[0])  # connections opened, scripts loaded

    def forgets(sources: list[str]) -> dict[str, int]:
        return fewest_commands_of(
            runtime.redis,
            [
                lambda s=s: runtime.personal_memory.forget(OWNER, s)  # type: ignore[misc]  # python/mypy#15459
                for s in sources
            ],
        )

    small = forgets(ids[1:4])
    unknown_small = forgets([source_id_for(KEY, f"never said, small {i}") for i in range(3)])
    ids += queue_backlog(h, 4, BACKLOG)
    large = forgets(ids[-3:])
    unknown_large = forgets([source_id_for(KEY, f"never said, large {i}") for i in range(3)])

    assert large == small and unknown_large == unknown_small
    assert sum(large.values()) <= 8 and sum(unknown_large.values()) <= 2, (large, unknown_large)
    assert WALKS.isdisjoint(large) and WALKS.isdisjoint(unknown_large)
