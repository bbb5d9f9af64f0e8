"""Graceful shutdown of a worker process: SIGTERM lets the job in hand finish,
returns the rest, releases the lease and exits; a second SIGTERM exits at once
and loses nothing the ledger, the broker's requeue and the sweeper cannot recover."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from memjobs_client import keys
from memjobs_client.contracts import owner_key
from tests.support.harness import HarnessFactory, MakeSettings, kill_group, spawn_workers
from tests.support.ledger import remember_now
from tests.support.openai_server import FakeOpenAI, echo_facts_handler
from tests.support.polling import wait_for

OWNER = "shutdown@example.com"
KEY = owner_key(OWNER)


def log_messages(path: Path) -> list[str]:
    """The messages of a worker's JSON Lines log, whole lines only (it is being written)."""
    text = path.read_text(errors="replace")
    return [json.loads(line)["msg"] for line in text[: text.rfind("\n") + 1].splitlines()]


@pytest.fixture
def echo_model(fake_model: FakeOpenAI) -> FakeOpenAI:
    """The model stand-in, extracting the facts it is given."""
    fake_model.set_chat_handler(echo_facts_handler)
    return fake_model


@pytest.mark.slow
def test_sigterm_finishes_the_job_in_hand_releases_the_lease_and_exits(
    model_settings: MakeSettings,
    harness_factory: HarnessFactory,
    echo_model: FakeOpenAI,
    procs: list[Any],
    tmp_path: Path,
) -> None:
    echo_model.slow_next("chat", 3.0)  # SIGTERM arrives while the model answers
    settings = model_settings(model_timeout_ms=30_000)
    h = harness_factory(settings)
    ids = [remember_now(h, KEY, t) for t in ("I grow basil", "我养了一只猫", "I cycle to work")]
    worker = spawn_workers(settings, tmp_path / "worker.log", threads=1)
    procs.append(worker)
    echo_model.wait_for_request("chat", 1, timeout_s=90)
    # Work it will not start: returned to Redis, not lost.
    for i in range(5):
        h.client.remember("later@example.com", f"queued behind the shutdown {i}")
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    code = worker.wait(60)
    took = time.monotonic() - started
    assert code == 0, f"exit code {code}"
    assert took < 30
    assert {r.source_id: r.state for r in h.store.list_sources(KEY)} == dict.fromkeys(ids, "learned")
    assert not h.runtime.redis.exists(keys.lock("learn", KEY))  # released, not left to expire
    queues = h.queues()
    assert sum(q["in_flight"] for q in queues.values()) == 0, queues
    assert queues["memjobs_remember"]["ready"] + len(h.store.list_sources(owner_key("later@example.com"))) >= 5


@pytest.mark.slow
def test_a_second_sigterm_exits_at_once_and_nothing_is_lost(
    model_settings: MakeSettings,
    harness_factory: HarnessFactory,
    echo_model: FakeOpenAI,
    procs: list[Any],
    tmp_path: Path,
) -> None:
    echo_model.hang_next("chat")  # the job in hand would never finish by itself
    settings = model_settings(model_timeout_ms=120_000, lease_ms=1500, broker_heartbeat_timeout_ms=2000)
    h = harness_factory(settings)
    ids = [remember_now(h, KEY, t) for t in ("I read before sleeping", "我周五游泳")]
    log_path = tmp_path / "worker.log"
    worker = spawn_workers(settings, log_path, threads=1)
    procs.append(worker)
    echo_model.wait_for_request("chat", 1, timeout_s=90)
    worker.send_signal(signal.SIGTERM)
    # The first signal handled all the way down: Dramatiq's worker process logs
    # "Shutting down..." when its handler has ended the run loop and it starts
    # stopping (consumers first, then waiting for the job in hand, which hangs).
    wait_for(
        lambda: "Shutting down..." in log_messages(log_path), 60, "the worker process to start its graceful shutdown"
    )
    assert worker.poll() is None  # ... so it is still alive, waiting on its job
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    worker.wait(30)
    assert time.monotonic() - started < 10
    kill_group(worker)  # whatever is left of the group
    echo_model.release()

    procs.append(spawn_workers(settings, tmp_path / "fresh.log", threads=2))

    def swept_and_learned() -> bool:  # the sweeper re-enqueues what the kill left pending
        h.runtime.sweeper.once()
        return {r.state for r in h.store.list_sources(KEY)} == {"learned"}

    wait_for(swept_and_learned, 60, "every source learned by a fresh worker", poll_s=0.5)
    assert sorted(r.source_id for r in h.store.list_sources(KEY)) == sorted(ids)
    committed = [e for e in h.store.attempt_events(KEY) if e[3] == "committed"]
    assert len(committed) == 1  # learned once: the interrupted attempt never committed


def test_the_sweeper_service_sweeps_until_sigterm(
    make_settings: MakeSettings, harness_factory: HarnessFactory, tmp_path: Path
) -> None:
    """`memjobs sweep --every N` (the compose/Kubernetes/systemd sweeper): passes
    re-enqueue pending owners and touch the health file; SIGTERM ends it cleanly."""
    import subprocess
    import sys

    from memjobs_worker.sweeper import alive_file
    from tests.support.harness import REPO, worker_env

    settings = make_settings(sweep_pending_after_ms=0)
    h = harness_factory(settings)
    remember_now(h, KEY, "the sweeper finds me")
    h.runtime.scheduler.clear(KEY)  # as if the extraction message had been lost
    before = sum(h.queues()["memjobs_extract"][k] for k in ("ready", "delayed"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "memjobs_worker.cli.main", "sweep", "--every", "0.2"],
        env=worker_env(settings),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def swept() -> bool:  # a pass touches the health file
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
            return alive_file(settings.data_dir).exists()

        wait_for(swept, 60, "a sweep pass")
        after = sum(h.queues()["memjobs_extract"][k] for k in ("ready", "delayed"))
        assert after > before  # the pending owner was re-enqueued
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
