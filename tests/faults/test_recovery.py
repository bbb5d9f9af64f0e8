"""Recovery with the default timings, durability of acknowledged jobs, bounded
producer calls, and a drain that ends when the work is done (issue 13,
weaknesses 2 and 3, and outages)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from dramatiq.brokers.redis import MAINTENANCE_SCALE

from memjobs_client import MemjobsClient, keys
from memjobs_client.contracts import ACTOR_EXTRACT, ExtractFacts, owner_key
from memjobs_client.errors import BackendUnavailable
from memjobs_worker.embedded import EmbeddedRedis
from memjobs_worker.ops import status as ops
from memjobs_worker.settings import default_of
from tests.support.harness import Harness, HarnessFactory, MakeSettings, kill_group, spawn_workers
from tests.support.ledger import remember_now
from tests.support.openai_server import FakeOpenAI, echo_facts_handler
from tests.support.polling import wait_for

DEFAULTS = {
    name: default_of(key)
    for name, key in (
        ("lease_ms", "memory.lease_ms"),
        ("broker_heartbeat_timeout_ms", "workers.broker_heartbeat_timeout_ms"),
        ("sweep_pending_after_ms", "lifecycle.sweep_pending_after_ms"),
        ("sweep_interval_ms", "lifecycle.sweep_interval_ms"),
        ("heartbeat_interval_ms", "workers.heartbeat_interval_ms"),
        ("heartbeat_ttl_ms", "workers.heartbeat_ttl_ms"),
    )
}
EXTRACT_QUEUE = "memjobs_extract"

pytestmark = pytest.mark.fault


def extract_holders(h: Harness) -> dict[str, set[bytes | str]]:
    """Which worker process (by Dramatiq broker id) holds which extraction
    messages fetched and not yet acknowledged."""
    head, tail = keys.acks("\0", EXTRACT_QUEUE).split("\0")
    held: dict[str, set[bytes | str]] = {}
    for raw in h.runtime.redis.scan_iter(match=keys.acks("*", EXTRACT_QUEUE)):
        name = raw.decode() if isinstance(raw, bytes) else str(raw)
        if members := h.runtime.redis.smembers(name):
            held[name.removeprefix(head).removesuffix(tail)] = set(members)
    return held


@pytest.mark.slow
def test_kill_9_of_a_host_is_recovered_within_30_s_with_the_default_timings(
    model_settings: MakeSettings,
    harness_factory: HarnessFactory,
    fake_model: FakeOpenAI,
    procs: list[Any],
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    fake_model.set_chat_handler(echo_facts_handler)
    fake_model.hang_next("chat")  # the doomed host dies inside its model call
    settings = model_settings(**DEFAULTS, model_timeout_ms=120_000)
    h = harness_factory(settings)
    owners = [f"owner-{i}@example.com" for i in range(4)]
    ids = [remember_now(h, owner_key(owners[i % 4]), f"fact {i} of the recovery test") for i in range(16)]
    procs.append(spawn_workers(settings, tmp_path / "doomed.log", threads=2))
    fake_model.wait_for_request("chat", 1, timeout_s=90)
    procs.append(spawn_workers(settings, tmp_path / "survivor.log", threads=2))
    wait_for(lambda: ops.live_workers(h.runtime.redis) >= 2, 90, "the surviving host's heartbeat")

    stop = threading.Event()

    def sweeper() -> None:  # as `memjobs up` and the compose sweeper do
        while not stop.wait(settings.lifecycle.sweep_interval_ms / 1000):
            h.runtime.sweeper.once()

    thread = threading.Thread(target=sweeper, daemon=True)
    pending = [r for o in owners for r in h.store.list_sources(owner_key(o)) if r.state == "pending"]
    assert pending, "the doomed host must still be inside its extraction"
    killed_at = time.monotonic()
    kill_group(procs[0])
    thread.start()
    try:

        def all_learned() -> bool:
            found = [r.state for o in owners for r in h.store.list_sources(owner_key(o))]
            return len(found) == len(ids) and set(found) == {"learned"}

        wait_for(all_learned, 60, "every source learned after the kill")
        recovered_s = time.monotonic() - killed_at
    finally:
        stop.set()
        thread.join()
    print(f"kill -9 of a host: every source learned {recovered_s:.1f} s after the kill (defaults: {DEFAULTS})")
    record_property("host_kill_recovery_s", round(recovered_s, 1))
    assert recovered_s < 30
    assert ops.drain(h.runtime.redis, h.store, timeout_s=10), ops.status(h.runtime.redis, h.store)


@pytest.mark.slow
def test_a_live_but_slow_worker_keeps_its_messages(
    model_settings: MakeSettings,
    harness_factory: HarnessFactory,
    fake_model: FakeOpenAI,
    procs: list[Any],
    tmp_path: Path,
) -> None:
    """An extraction far longer than the broker's heartbeat timeout is never
    handed to another worker: the slow process keeps beating."""
    fake_model.set_chat_handler(echo_facts_handler)
    fake_model.hang_next("chat")
    settings = model_settings(
        broker_heartbeat_timeout_ms=1500, heartbeat_interval_ms=300, lease_ms=1500, model_timeout_ms=60_000
    )
    h = harness_factory(settings)
    sid = remember_now(h, owner_key("slow@example.com"), "I repair old clocks")
    procs.append(spawn_workers(settings, tmp_path / "slow.log", threads=1))
    fake_model.wait_for_request("chat", 1, timeout_s=90)
    held_from_ms = time.time() * 1000  # the slow extraction began at or before this
    [(slow, held)] = wait_for(
        lambda: list(extract_holders(h).items()), 30, "the slow worker's extraction among its unacknowledged messages"
    )
    procs.append(spawn_workers(settings, tmp_path / "other.log", threads=1))
    wait_for(lambda: ops.live_workers(h.runtime.redis) >= 2, 90, "the second worker's heartbeat")
    # Why this event suffices (instead of sleeping through "long enough"):
    # Dramatiq takes a message from a worker in one way only. A dispatch by any
    # process (one in ten: memjobs' maintenance_chance) requeues the unacknowledged
    # messages of every broker whose score in __heartbeats__ is older than
    # heartbeat_timeout by the dispatching process's wall clock in ms (the clock
    # read here), and deletes that broker's set of them. So wait for the slow
    # worker's own heartbeat stamped four heartbeat timeouts after its job began:
    # it beat while its only thread was busy (had it stopped, this never comes and
    # the test fails), and the window the fixed sleep covered has passed by the
    # clock the requeue uses. Had a gap let another worker's dispatch find it dead
    # meanwhile, its set would be gone or changed below.
    timeout_ms = settings.workers.broker_heartbeat_timeout_ms
    wait_for(
        lambda: (h.runtime.redis.zscore(keys.BROKER_HEARTBEATS, slow) or 0) >= held_from_ms + 4 * timeout_ms,
        60,
        "the slow worker's heartbeat four heartbeat timeouts into its job",
    )
    # And one dead-worker check on the extraction queue now, with the workers'
    # heartbeat timeout, not left to the one-in-ten chance: it finds it alive.
    chance = h.broker.maintenance_chance
    h.broker.maintenance_chance = MAINTENANCE_SCALE
    try:
        h.broker.do_qsize(EXTRACT_QUEUE)
    finally:
        h.broker.maintenance_chance = chance
    assert extract_holders(h) == {slow: held}  # never requeued: still the slow worker's
    queues = h.queues()[EXTRACT_QUEUE]
    assert (queues["ready"], queues["in_flight"]) == (0, 1), queues
    assert len(fake_model.requests_for("chat")) == 1  # nobody else started the extraction
    fake_model.release()
    wait_for(
        lambda: [r.state for r in h.store.list_sources(owner_key("slow@example.com"))] == ["learned"],
        60,
        "the slow extraction to commit",
    )
    assert [r.source_id for r in h.store.list_sources(owner_key("slow@example.com"))] == [sid]


def test_acknowledged_jobs_survive_kill_9_of_redis(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis")  # the embedded default: appendfsync always
    server.start()
    try:
        client = MemjobsClient(server.url, timeout_s=2)
        ids = [client.remember("dur@example.com", f"durable fact {i}") for i in range(300)]
        client.close()
        config = redis.Redis.from_url(server.url, decode_responses=True).config_get("appendfsync")
        assert config == {"appendfsync": "always"}
        server.kill()  # SIGKILL right after the last acknowledgement
        server.start()
        raw = redis.Redis.from_url(server.url)
        assert raw.llen("memjobs:memjobs_remember") == len(set(ids))
    finally:
        server.stop()


def test_a_producer_call_against_a_silent_redis_fails_within_the_bound() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # accepts the TCP handshake, never answers
    port = silent.getsockname()[1]
    try:
        client = MemjobsClient(f"redis://127.0.0.1:{port}/0", timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(BackendUnavailable):
            client.remember("hang@example.com", "this call must not hang")
        took = time.monotonic() - started
        silent.setblocking(False)
        attempts = 0  # each connection the producer opened waited at most timeout_s
        with contextlib.suppress(BlockingIOError):
            while True:
                silent.accept()[0].close()
                attempts += 1
    finally:
        silent.close()
    # Bounded by its attempts, each cut at timeout_s (4 × 0.5 s = 2 s of waiting); the
    # wall-clock bound only says "never hangs", with room for a loaded machine (2.5 s
    # were measured at load average 14 on 2 cores, against a former bound of 3 s).
    assert 1 <= attempts <= 4, attempts
    assert took < 10, f"the producer waited {took:.1f} s"


def test_drain_ends_when_only_needless_extractions_are_left(
    make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    h = harness_factory(make_settings())
    h.start_worker()
    h.client.remember("drain@example.com", "I bake sourdough on Fridays")
    h.drain()
    h.stop_worker()
    # A retry waiting out a long backoff, with nothing pending: nothing left to do.
    nudge = ExtractFacts(owner_key=owner_key("drain@example.com"), trigger="manual")
    h.client.send(ACTOR_EXTRACT, nudge.model_dump(mode="json"), delay_ms=300_000)
    assert h.queues()["memjobs_extract"]["delayed"] == 1
    assert ops.drain(h.runtime.redis, h.store, timeout_s=30)  # returns once drained: generous
    # A remember still queued is work: no drain.
    h.client.remember("drain@example.com", "I walk the dog at six")
    assert not ops.drain(h.runtime.redis, h.store, timeout_s=0.5)
