"""The pools of a small host in one process (``MEMJOBS_WORKER_LAYOUT``,
:class:`memjobs_worker.pools.SharedWorker`): which hosts share, and the pool
contract kept inside the one process (a model call that hangs holds no remember).

Real parts: the session's Redis and PostgreSQL, a real worker process, the
fake model server (its chat route held until the test releases it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memjobs_client import keys
from memjobs_client.contracts import CHEAP_QUEUES, MODEL_QUEUES, QUEUE_EXTRACT, QUEUE_KNOWLEDGE, owner_key
from memjobs_worker import pools
from memjobs_worker.embedded.process import group_members
from memjobs_worker.pools import pool_queues, shares_process
from memjobs_worker.settings import Settings, WorkerSettings
from tests.support.harness import HarnessFactory, MakeSettings, kill_group, spawn_workers
from tests.support.openai_server import FakeOpenAI, echo_facts_handler
from tests.support.polling import wait_for

pytestmark = pytest.mark.fault

GiB = 2**30


@pytest.mark.parametrize(
    ("cores", "memory", "processes", "layout", "shared"),
    [
        (2, 24 * GiB, 1, "auto", True),  # few cores
        (16, 4 * GiB, 1, "auto", True),  # little memory
        (16, 64 * GiB, 1, "auto", False),  # a large host: a process per pool
        (2, 4 * GiB, 2, "auto", False),  # more processes asked for: Dramatiq's processes
        (16, 64 * GiB, 4, "shared", True),  # forced either way
        (2, 4 * GiB, 1, "split", False),
    ],
)
def test_a_small_host_shares_one_process_unless_told(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cores: int, memory: int, processes: int, layout: str, shared: bool
) -> None:
    monkeypatch.setattr(pools, "host_size", lambda: (cores, memory))
    settings = Settings(data_dir=tmp_path, workers=WorkerSettings(worker_layout=layout))  # type: ignore[arg-type]  # a str, as from the environment
    assert shares_process(settings.workers, processes) is shared


def test_the_shared_process_keeps_each_pool_on_its_own_queues() -> None:
    two = pool_queues(WorkerSettings(), 3, knowledge_on=True)
    assert two == [(tuple(MODEL_QUEUES), 3), (tuple(CHEAP_QUEUES), 32)]  # the cheap pool: 32 threads by default
    [one] = pool_queues(WorkerSettings(fast_worker_processes=0), 3, knowledge_on=False)
    assert set(one[0]) == set(CHEAP_QUEUES) | (set(MODEL_QUEUES) - {QUEUE_KNOWLEDGE}) and one[1] == 3


@pytest.fixture
def shared_worker() -> Iterator[Callable[..., Any]]:
    procs: list[Any] = []

    def spawn(settings: Settings, log_path: Path, threads: int) -> Any:
        proc = spawn_workers(settings, log_path, processes=1, threads=threads)
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        kill_group(proc)


def test_a_hung_model_call_holds_no_remember_in_the_shared_process(
    model_settings: MakeSettings,
    harness_factory: HarnessFactory,
    fake_model: FakeOpenAI,
    shared_worker: Callable[..., Any],
    tmp_path: Path,
) -> None:
    fake_model.set_chat_handler(echo_facts_handler)
    fake_model.hang_next("chat")  # the one model thread stays in its call until released
    # The call is not cut short meanwhile (the test releases it).
    settings = model_settings(worker_layout="shared", model_timeout_ms=120_000)
    h = harness_factory(settings)
    first = h.client.remember("holder@example.com", "I keep bees on the roof")
    proc = shared_worker(settings, tmp_path / "worker.log", threads=1)
    fake_model.wait_for_request("chat", 1, timeout_s=60)

    # One process: it beats once, for every queue of both pools.
    assert group_members(proc.pid) == [proc.pid]

    def beats() -> list[dict[str, Any]]:
        return [
            json.loads(v)
            for k in h.runtime.redis.scan_iter(f"{keys.HEARTBEAT_PREFIX}*")
            if (v := h.runtime.redis.get(k)) is not None
        ]

    [beat] = wait_for(beats, 60, "the worker's heartbeat")
    assert beat["pid"] == proc.pid and set(CHEAP_QUEUES) | {QUEUE_EXTRACT} <= set(beat["queues"])

    owners = [f"owner-{i}@example.com" for i in range(12)]
    sent = {o: h.client.remember(o, f"my locker number is {i}") for i, o in enumerate(owners)}

    def in_ledger() -> bool:
        return all(any(r.source_id == sid for r in h.store.list_sources(owner_key(o))) for o, sid in sent.items())

    # The cheap pool's threads take them while the model pool's one thread waits.
    wait_for(in_ledger, 60, "every remember in the ledger while the model call hangs")
    assert len(fake_model.requests_for("chat")) == 1, "the held call is still the only one"
    assert [r.state for r in h.store.list_sources(owner_key("holder@example.com"))] == ["pending"]

    fake_model.release()
    h.drain(120)
    assert [r.state for r in h.store.list_sources(owner_key("holder@example.com")) if r.source_id == first] == [
        "learned"
    ]
