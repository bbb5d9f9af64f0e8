"""Redis Sentinel by setting: producers, workers, locks and the sweeper follow a
failover (master killed), and a job acknowledged with ``WAIT`` for one replica
survives it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from memjobs_client.connect import parse_sentinels, redis_client
from memjobs_client.contracts import RememberSource, owner_key, source_id_for
from memjobs_client.errors import BackendUnavailable
from memjobs_worker.lease import LeaseLock
from memjobs_worker.settings import Settings
from tests.support.harness import Harness
from tests.support.netns import Topology, netns_unavailable, run_in
from tests.support.polling import wait_for
from tests.support.sentinel import MASTER_NAME, SentinelSet

OWNER = "sentinel@example.com"

pytestmark = pytest.mark.fault


@pytest.fixture
def sentinel_set(tmp_path: Path) -> Iterator[SentinelSet]:
    servers = SentinelSet(tmp_path / "sentinel")
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


def test_parse_sentinels() -> None:
    assert parse_sentinels("a:1, b:2,") == [("a", 1), ("b", 2)]
    assert parse_sentinels(None) == []
    with pytest.raises(ValueError, match="is not host:port"):
        parse_sentinels("no-port")


@pytest.mark.slow
def test_everything_follows_a_sentinel_failover_and_nothing_acknowledged_is_lost(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    sentinel_set: SentinelSet,
) -> None:
    settings = make_settings(
        # The URL's host is not used with sentinels: the master is looked up by name.
        redis_url="redis://unused.invalid:1/0",
        redis_sentinels=sentinel_set.sentinels,
        redis_sentinel_master=MASTER_NAME,
        redis_waitaof_replicas=1,
        redis_timeout_ms=1000,
    )
    h = harness_factory(settings)
    h.start_worker()
    before = [h.client.remember(OWNER, f"before the failover {i}") for i in range(10)]
    h.drain(60)
    lock = LeaseLock(h.runtime.redis, "learn", owner_key(OWNER), lease_ms=5000)
    token_before = lock.try_acquire(floor=h.store.newest_token(owner_key(OWNER)))
    assert token_before is not None and lock.release() == "released"

    old = sentinel_set.master_port
    killed = sentinel_set.kill_master()
    new = sentinel_set.wait_failover(old)
    assert new != old
    # The new master has no replica yet: a producer call cannot be made durable,
    # so it fails, in bounded time, rather than acknowledging a job it could lose.
    started = time.monotonic()
    with pytest.raises(BackendUnavailable):
        h.client.remember(OWNER, "while no replica holds a copy")
    assert time.monotonic() - started < 10
    sentinel_set.restart(killed)  # the sentinels make the old master a replica
    wait_for(lambda: sentinel_set.replicas_in_sync(new), 60, "the old master to rejoin as a replica", poll_s=0.1)
    after: list[str] = []
    deadline = time.monotonic() + 30
    # The gateway retries the refused call (same words, same source: stored once).
    for text in ["while no replica holds a copy", *(f"after the failover {i}" for i in range(10))]:
        while True:  # the first calls may still meet the dead master: bounded, then retried
            try:
                after.append(h.client.remember(OWNER, text))
                break
            except BackendUnavailable:
                assert time.monotonic() < deadline, "the producer never reached the new master"
    h.drain(90)
    states = {r.source_id: r.state for r in h.store.list_sources(owner_key(OWNER))}
    assert states == {sid: "learned" for sid in [*before, *after]}
    # The sweeper reaches the new master too. An owner whose extraction message
    # was lost in the failover: a pending source in the ledger, and no extraction
    # scheduled (nothing else is pending now), so the pass must re-enqueue
    # exactly that owner, through the sentinels, and a worker learns it.
    lost = owner_key("lost-in-the-failover@example.com")
    text = "my extraction was lost in the failover"
    lost_sid = source_id_for(lost, text)
    assert (
        h.store.add_source(RememberSource(owner_key=lost, source_id=lost_sid, text=text), sent_at=datetime.now(UTC))
        == "created"
    )
    assert h.runtime.sweeper.once()["owners_requeued"] == 1
    h.drain(90)
    assert [(r.source_id, r.state) for r in h.store.list_sources(lost)] == [(lost_sid, "learned")]
    token_after = lock.try_acquire(floor=h.store.newest_token(owner_key(OWNER)))
    assert token_after is not None and token_after > token_before  # never backwards
    lock.release()


@pytest.mark.slow
def test_a_call_from_a_host_cut_off_from_redis_and_its_sentinels_fails_in_seconds(
    tmp_path: Path,
) -> None:
    """With redis-py's defaults each sentinel was asked four times, backing off
    up to 10 s: a cut-off worker spent 25 s in every Redis call, lease renewals
    included, instead of the few timeouts the lookup is worth."""
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    topo = Topology(["redis", "host"])
    servers = SentinelSet(tmp_path / "sentinel", host=topo.address("redis"), prefix=topo.exec_prefix("redis"))
    timeout_s = 0.5

    def cut_off() -> list[float]:
        client = redis_client(
            f"redis://{topo.address('redis')}:{servers.master_port}/0",
            timeout_s=timeout_s,
            sentinels=servers.sentinels,
            sentinel_master=MASTER_NAME,
        )
        client.set("probe", "1")  # connections open to a sentinel and the master
        topo.partition("host", "redis")
        took = []
        for _ in range(3):  # the pooled connections first, then fresh lookups
            started = time.monotonic()
            with pytest.raises(redis.RedisError):
                client.get("probe")
            took.append(time.monotonic() - started)
        return took

    try:
        topo.create()
        run_in(topo.ns("redis"), servers.start)
        took = run_in(topo.ns("host"), cut_off)
    finally:
        servers.stop()
        topo.destroy()
    # Three sentinels and the master, each a timeout at most, one quick retry.
    assert max(took) < 4 * timeout_s * 2, took
