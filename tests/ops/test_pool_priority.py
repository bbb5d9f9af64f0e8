"""The model jobs' pool runs at a lower CPU priority than the cheap jobs' pool,
so a remember on a busy host goes before an extraction's CPU work."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import redis

from memjobs_client.contracts import QUEUE_EXTRACT, QUEUE_REMEMBER
from memjobs_worker.__main__ import MODEL_POOL_NICENESS
from memjobs_worker.observability.heartbeat import live_heartbeats
from memjobs_worker.settings import Settings
from tests.support.harness import kill_group, spawn_workers
from tests.support.polling import wait_for


def _niceness(pid: int) -> int:
    return int(psutil.Process(pid).nice())


@pytest.mark.slow
def test_the_model_pool_yields_the_cpu_to_the_cheap_pool(
    make_settings: Callable[..., Settings],
    tmp_path: Path,
) -> None:
    settings = make_settings(worker_layout="split")  # pools in processes of their own
    client = redis.Redis.from_url(settings.redis.url or "")
    proc = spawn_workers(settings, tmp_path / "worker.log", processes=1, threads=1)
    try:
        wait_for(lambda: len(live_heartbeats(client)) == 2, 120, "both pools' heartbeats")
        beats = live_heartbeats(client)
        by_queue = {}
        for key in beats:
            beat = json.loads(client.get(key) or "{}")
            by_queue[tuple(beat["queues"])] = _niceness(int(beat["pid"]))
    finally:
        kill_group(proc)
    [model] = [n for queues, n in by_queue.items() if QUEUE_EXTRACT in queues]
    [cheap] = [n for queues, n in by_queue.items() if QUEUE_REMEMBER in queues]
    ours = os.nice(0)
    assert cheap == ours
    assert model == min(19, ours + MODEL_POOL_NICENESS)
