"""Fencing tokens never go backwards, whatever Redis forgets (issue 13, weakness 1).

Redis keeps the per-owner counter, PostgreSQL the newest token it accepted.
When Redis loses the counter (failover to a lagging replica, restart without
persistence, a flush), acquisition floors it at the store's newest token.
"""

from __future__ import annotations

from collections.abc import Callable

import redis
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from memjobs_client.contracts import ACTOR_REMEMBER, RememberSource, owner_key, source_id_for
from memjobs_worker.lease import LeaseLock
from memjobs_worker.memory.store.schema import fencing
from memjobs_worker.settings import Settings
from tests.support.harness import Harness

KEY = owner_key("dora")


def test_acquisition_is_floored_and_the_lock_stays_exclusive(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    first = LeaseLock(client, "learn", KEY, lease_ms=5000)
    assert first.try_acquire(floor=10_000) == 10_001
    other = LeaseLock(client, "learn", KEY, lease_ms=5000)
    assert other.try_acquire(floor=50_000) is None  # held: the floor grants nothing
    assert int(client.get(first.fence_key) or 0) == 10_001  # a busy attempt moves nothing
    assert first.release() == "again"  # the busy attempt set the dirty flag
    assert first.release() == "released"
    assert other.try_acquire(floor=0) == 10_002  # a lower floor never lowers the counter


def test_owners_far_ahead_in_the_store_learn_after_redis_is_emptied(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    h = harness_factory(make_settings())
    owners = [owner_key(f"veteran-{i}") for i in range(5)]
    with h.store.engine.begin() as conn:  # ten thousand past extractions each
        conn.execute(pg_insert(fencing).values([{"owner_key": k, "token": 10_000} for k in owners]))
    h.runtime.redis.flushall()  # the test session's own Redis: the counters are gone

    ids: dict[str, str] = {}
    for i in range(10):
        key = owners[i % len(owners)]
        text = f"new fact number {i} after the Redis loss"
        sid = source_id_for(key, text)
        ids[sid] = key
        h.client.send(ACTOR_REMEMBER, RememberSource(owner_key=key, source_id=sid, text=text).model_dump(mode="json"))
    h.start_worker(threads=2)
    h.drain(timeout_s=60)

    learned = {r.source_id: r.state for k in owners for r in h.store.list_sources(k)}
    assert learned == {sid: "learned" for sid in ids}, learned
    with h.store.engine.connect() as conn:
        tokens = dict(conn.execute(sa.select(fencing.c.owner_key, fencing.c.token)).all())
    assert all(tokens[k] > 10_000 for k in owners), tokens
    assert h.store.newest_token(owners[0]) == tokens[owners[0]]
    assert h.store.newest_token(owner_key("nobody")) == 0
