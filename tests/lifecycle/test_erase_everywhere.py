"""Erase one owner of three while work runs for all of them (real worker
processes, the stand-in model answering an extraction of the owner's that is
running when the erasure starts, remembers queued before and during it, a
dead letter, a delayed job), then look for the owner everywhere: every table,
every Redis key and value, Redis's files after a rewrite, the data directory,
the workers' and the command's logs. The other owners recall as before
(issue 35, item 1)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dramatiq
import pytest
import redis

from memjobs_client import keys
from memjobs_client.contracts import ACTOR_EXTRACT, ACTOR_REMEMBER, QUEUE_REMEMBER
from memjobs_worker.cli import exits
from memjobs_worker.embedded import EmbeddedRedis
from memjobs_worker.settings import Settings
from tests.lifecycle.conftest import Planted, plant
from tests.support.cli import cli_env, run_cli
from tests.support.harness import Harness, kill_group, spawn_workers
from tests.support.leaks import files_holding, redis_keys_holding, tables_holding
from tests.support.openai_server import FakeOpenAI, echo_facts_handler
from tests.support.polling import wait_for

QUERIES = ("hiking in the mountains", "where does the sister live")


def _recall(h: Harness, planted: Planted) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    return {
        q: sorted((hit.text, tuple(hit.source_ids)) for hit in h.pipeline.recall(planted.key, q, 5)) for q in QUERIES
    }


def _persisted(client: redis.Redis) -> bool:
    info = client.info("persistence")
    return (
        not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"] and not info["rdb_bgsave_in_progress"]
    )


@pytest.mark.slow
def test_an_erased_owner_leaves_no_trace_while_the_others_work_on(
    model_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI,
    redis_server: EmbeddedRedis,
    procs: list[Any],
    tmp_path: Path,
) -> None:
    run = uuid.uuid4().hex[:8]
    held = threading.Event()
    seen = threading.Event()

    def model(request: dict[str, Any]) -> str:
        # The erased owner's next extraction is in the model's hands when the erasure starts.
        if f"Qerased{run}" in str(request) and not held.is_set():
            seen.set()
            held.wait(60)
        return echo_facts_handler(request)

    settings = model_settings(data_dir=tmp_path / "data", model_timeout_ms=60_000)
    h = harness_factory(settings)
    log = tmp_path / "workers.log"
    procs.append(spawn_workers(settings, log, threads=4))
    fake_model.set_chat_handler(echo_facts_handler)
    erased = plant(h, f"erased-{run}@example.com", f"Qerased{run}")
    bob = plant(h, f"bob-{run}@example.com", f"Qbob{run}")
    carol = plant(h, f"carol-{run}@example.com", f"Qcarol{run}")
    h.drain()
    before = {p.owner: _recall(h, p) for p in (bob, carol)}
    assert all(any(r.values()) for r in before.values()), "nothing learned to compare"

    # Work of the owner in every state: running (held by the model), queued, dead, delayed.
    fake_model.set_chat_handler(model)
    h.client.remember(erased.owner, f"{erased.tag} waters the ficus on Sundays")
    assert seen.wait(30), "the owner's extraction never reached the model"
    h.broker.enqueue(
        dramatiq.Message(
            queue_name=QUEUE_REMEMBER,
            actor_name=ACTOR_REMEMBER,
            args=({"owner_key": erased.key, "note": erased.tag},),
            kwargs={},
            options={},
        )
    )
    wait_for(lambda: h.queues()[QUEUE_REMEMBER]["dead"], 30, "the malformed remember dead-lettered")
    h.client.send(ACTOR_EXTRACT, {"owner_key": erased.key, "trigger": "manual"}, delay_ms=3_600_000)
    for n in range(5):
        h.client.remember(erased.owner, f"{erased.tag} queued thought number {n}")

    env = cli_env(
        settings.data_dir, MEMJOBS_REDIS_URL=str(settings.redis.url), MEMJOBS_DATABASE_URL=str(settings.database.url)
    )
    results: list[Any] = []
    erasing = threading.Thread(target=lambda: results.append(run_cli(env, "erase", "--owner", erased.owner, "--json")))
    erasing.start()
    wait_for(lambda: h.runtime.redis.exists(keys.owner_erased(erased.key)), 30, "the erasure's marker")
    # While it runs: more work for everyone, the erased owner's included.
    h.client.remember(erased.owner, f"{erased.tag} said this during the erasure")
    h.client.remember(bob.owner, f"Qbob{run} plays the cello on Fridays")
    held.set()  # the running extraction ends; the erasure was waiting for it
    erasing.join(120)
    assert results and results[0].code == exits.OK, str(results[0] if results else "no result")
    counts = results[0].json()["counts"]
    assert counts["sources"] and counts["memories"] and counts["queued_jobs"], counts
    h.client.remember(erased.owner, f"{erased.tag} said this after the erasure")  # dropped: the hold
    h.drain()

    needles = erased.needles
    assert tables_holding(str(settings.database.url), needles) == []
    assert redis_keys_holding(h.runtime.redis, needles) == []
    assert files_holding([settings.data_dir], needles) == []
    h.runtime.redis.bgrewriteaof()
    wait_for(lambda: _persisted(h.runtime.redis), 60, "the append-only file rewritten")
    h.runtime.redis.save()
    assert files_holding([redis_server.directory], needles) == []
    kill_group(procs.pop())
    assert log.read_text(errors="replace").strip(), "the workers logged nothing to look in"
    assert files_holding([log.parent], needles) == []
    assert not any(n in results[0].stdout + results[0].stderr for n in needles)
    # What stays: the counts, said by `memjobs audit --erasures`, whose never.
    listed = run_cli(env, "audit", "--erasures", "--json")
    assert [(r["total"], r["finished_at"] is not None) for r in listed.json()] == [(sum(counts.values()), True)]
    assert not any(n in listed.stdout for n in needles)

    # The others: as before, and bob's work during the erasure was done.
    assert _recall(h, carol) == before[carol.owner]
    assert {s.state for s in h.store.list_sources(bob.key)} == {"learned"}
    assert len(h.store.list_sources(bob.key)) == 3
    for query, hits in before[bob.owner].items():
        assert set(hits) <= set(_recall(h, bob)[query])
