"""The console's running-jobs record: kept in memory as jobs start and end,
published once a period and only when it changed."""

from __future__ import annotations

import os
import socket

import dramatiq
import redis
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import RedisBroker

from memjobs_client import keys
from memjobs_worker.observability.running import TrackRunning, running_jobs
from tests.support.redis_commands import commands_of


def test_jobs_are_published_when_the_period_ends_and_cost_nothing_meanwhile(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    broker = RedisBroker(url=redis_url, namespace="memjobs")  # type: ignore[no-untyped-call]  # dramatiq is unannotated

    @dramatiq.actor(broker=broker, actor_name="long_job")
    def long_job(payload: dict[str, str]) -> None:
        return None

    track = TrackRunning(client, ttl_ms=60_000, publish_ms=600_000)  # published by hand below
    long_one = MessageProxy(long_job.message({"owner_key": "k" * 40}))
    short_one = MessageProxy(long_job.message({"owner_key": "k" * 40}))

    def run_two() -> None:
        track.before_process_message(broker, long_one)
        track.before_process_message(broker, short_one)
        track.after_process_message(broker, short_one)

    assert commands_of(client, run_two) == {}
    assert running_jobs(client) == []

    track.publish()

    [job] = running_jobs(client)
    assert (job.message_id, job.actor, job.pid) == (long_one.message_id, "long_job", str(os.getpid()))
    assert job.owner == "k" * 12  # the key's first characters only
    assert 0 < client.pttl(keys.running(socket.gethostname(), os.getpid())) <= 60_000
    assert commands_of(client, track.publish) == {}  # nothing changed: nothing sent

    track.after_process_message(broker, long_one)
    track.publish()
    assert running_jobs(client) == []
    broker.close()
