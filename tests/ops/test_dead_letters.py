"""Dead letters: listed without text, shown redacted, replayed once, purged.

The scenario of issue 25: extractions that exhausted their retries while the
model was down are dead letters; once the model is back, a replay learns each
source exactly once, and replaying the same extraction again learns nothing
twice.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from memjobs_client import keys
from memjobs_client.contracts import ACTOR_EXTRACT, QUEUE_EXTRACT, QUEUE_TASKS, owner_key
from memjobs_worker.memory.store.schema import attempts
from memjobs_worker.ops.collectors import QueueCollector
from memjobs_worker.ops.deadletters import DeadLetters, redact
from memjobs_worker.ops.status import queue_stats
from memjobs_worker.settings import Settings
from tests.support.harness import Harness
from tests.support.ledger import remember_now
from tests.support.openai_server import FakeOpenAI, echo_facts_handler
from tests.support.polling import wait_for
from tests.support.redis_values import as_bytes

OWNER = "dora-dead-letters@example.com"
KEY = owner_key(OWNER)
TEXTS = ["I keep my bike in the courtyard", "我每天早上喝绿茶"]


def states(h: Harness) -> dict[str, str]:
    return {r.source_id: r.state for r in h.store.list_sources(KEY)}


def committed_sources(h: Harness) -> Counter[str]:
    with h.store.engine.connect() as conn:
        rows = conn.execute(sa.select(attempts).where(attempts.c.owner_key == KEY)).all()
    return Counter(sid for row in rows if row.state == "committed" for sid in row.source_ids)


def dead_extraction(
    model_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness], fake_model: FakeOpenAI
) -> tuple[Harness, list[str]]:
    """Sources pending, their extraction dead-lettered after its retries (the model
    down past the outage budget, here none)."""
    fake_model.fail_next("chat", 500, count=100_000)
    h = harness_factory(
        model_settings(
            max_retries=2, model_max_attempts=1, min_backoff_ms=20, max_backoff_ms=50, outage_retry_budget_ms=0
        )
    )
    ids = [remember_now(h, KEY, t) for t in TEXTS]
    h.start_worker()
    wait_for(lambda: queue_stats(h.runtime.redis)[QUEUE_EXTRACT]["dead"] == 1, 60, "the extraction to be dead-lettered")
    return h, ids


def test_a_dead_extraction_is_listed_with_its_reason_and_no_text(
    model_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI,
) -> None:
    h, _ = dead_extraction(model_settings, harness_factory, fake_model)
    letters = DeadLetters(h.runtime.redis).letters()
    assert len(letters) == 1
    letter = letters[0]
    assert (letter.queue, letter.actor, letter.reason) == (QUEUE_EXTRACT, ACTOR_EXTRACT, "model_unavailable")
    assert letter.attempts == 3  # the first run and two retries
    assert letter.first_failed_at is not None and letter.first_failed_at < letter.last_failed_at
    assert letter.owner == KEY[:12]
    listed = json.dumps([x.as_dict() for x in letters])
    assert KEY not in listed and OWNER not in listed and not any(t in listed for t in TEXTS)


def test_a_replay_after_the_model_is_back_learns_each_source_once_even_replayed_twice(
    model_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI,
) -> None:
    h, ids = dead_extraction(model_settings, harness_factory, fake_model)
    dead = keys.dead_letters(QUEUE_EXTRACT)
    # redis-py types the reply without telling the scored pairs apart.
    scored: list[tuple[bytes, float]] = h.runtime.redis.zrange(dead, 0, 0, withscores=True)  # type: ignore[assignment]
    redis_id, score = scored[0]
    data = h.runtime.redis.hget(f"{dead}.msgs", redis_id)
    assert states(h) == {sid: "pending" for sid in ids}

    fake_model.reset()
    fake_model.set_chat_handler(echo_facts_handler)  # the model is back
    letters = DeadLetters(h.runtime.redis, h.broker)
    message_id = letters.letters()[0].message_id
    results: list[bool] = []
    racers = [threading.Thread(target=lambda: results.append(letters.retry(message_id))) for _ in range(2)]
    for t in racers:
        t.start()
    for t in racers:
        t.join()
    assert sorted(results) == [False, True]  # two operators at once: one replay
    h.drain()
    assert states(h) == {sid: "learned" for sid in ids}

    # The same extraction replayed a second time (the letter put back as it was).
    h.runtime.redis.zadd(dead, {redis_id: score})
    h.runtime.redis.hset(f"{dead}.msgs", redis_id, data)
    assert letters.retry_all() == (1, 0)
    wait_for(lambda: not any(queue_stats(h.runtime.redis)[QUEUE_EXTRACT].values()), 30, "the second replay to finish")
    h.drain()
    assert states(h) == {sid: "learned" for sid in ids}
    assert committed_sources(h) == Counter(ids)
    assert sorted(m.text for m in h.pipeline.memories(KEY)) == sorted(TEXTS)
    assert letters.totals()["retried"] == {QUEUE_EXTRACT: 2}
    assert letters.letters() == []


def test_show_redacts_the_payload_unless_revealed(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    h = harness_factory(make_settings(max_retries=0))
    secretless_goal = "把周末的照片整理好"
    h.client.record_task(OWNER, "task-42", secretless_goal, "running")
    poisoned = _poison_first(h, QUEUE_TASKS)
    letters = DeadLetters(h.runtime.redis, h.broker)
    shown = letters.show(poisoned)
    assert shown is not None and shown["reason"] in ("invalid_payload", "unknown")
    text = json.dumps(shown, ensure_ascii=False)
    assert secretless_goal not in text and "task-42" not in text and KEY not in text
    assert shown["payload"]["status"] == "running"
    revealed = letters.show(poisoned, reveal=True)
    assert revealed is not None and revealed["payload"]["goal"] == secretless_goal


def _poison_first(h: Harness, queue: str) -> str:
    """Dead-letter the queue's first message as a worker would (no worker runs here)."""
    client = h.runtime.redis
    redis_id = client.lpop(keys.queue(queue))
    assert redis_id is not None
    assert isinstance(redis_id, bytes)  # one id (no count given), as the client returns it
    data = client.hget(keys.messages(queue), redis_id)
    client.hdel(keys.messages(queue), redis_id)
    client.zadd(keys.dead_letters(queue), {redis_id: 1_000})
    client.hset(f"{keys.dead_letters(queue)}.msgs", redis_id, data)
    message: dict[str, Any] = json.loads(as_bytes(data))
    return str(message["message_id"])


def test_purge_one_older_than_and_all_count_what_they_removed(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    h = harness_factory(make_settings())
    for n in range(3):
        h.client.record_task(OWNER, f"task-{n}", "water the plants", "running")
    ids = [_poison_first(h, QUEUE_TASKS) for _ in range(3)]
    client = h.runtime.redis
    letters = DeadLetters(client)
    newest = next(x.redis_id for x in letters.letters() if x.message_id == ids[2])
    client.zadd(keys.dead_letters(QUEUE_TASKS), {newest: 10**13})  # dead far in the future
    assert letters.purge(ids[0]) and not letters.purge(ids[0])
    assert letters.purge_all(older_than_s=3600) == 1
    assert letters.count()[QUEUE_TASKS] == 1
    assert letters.purge_all(QUEUE_TASKS) == 1
    assert letters.letters() == [] and letters.totals()["purged"] == {QUEUE_TASKS: 3}
    families = {f.name: f for f in QueueCollector(client).collect()}
    purged = {
        s.labels["queue"]: s.value for s in families["memjobs_dead_letters_purged"].samples if s.name.endswith("_total")
    }
    assert purged[QUEUE_TASKS] == 3 and purged[QUEUE_EXTRACT] == 0
    with pytest.raises(ValueError, match="no queue 'no-such-queue'"):
        letters.purge_all("no-such-queue")


def test_an_undecodable_letter_is_listed_skipped_by_retry_and_purged(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    h = harness_factory(make_settings())
    dead = keys.dead_letters(QUEUE_TASKS)
    h.runtime.redis.zadd(dead, {"r-1": 1_000})
    h.runtime.redis.hset(f"{dead}.msgs", "r-1", b"\xff not json")
    letters = DeadLetters(h.runtime.redis, h.broker)
    [letter] = letters.letters()
    assert (letter.reason, letter.redis_id) == ("undecodable_message", "r-1")
    assert letters.retry_all() == (0, 1)
    assert letters.purge("r-1") and letters.letters() == []


def test_redact_keeps_ids_and_enumerations_and_hides_text() -> None:
    assert redact({"owner_key": "a" * 64, "text": "hello", "source_id": "src_1", "n": 3}) == {
        "owner_key": "a" * 12 + "…",
        "text": "[redacted: 5 characters]",
        "source_id": "src_1",
        "n": 3,
    }


def test_the_cli_lists_shows_retries_and_purges(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from memjobs_worker.cli.main import main

    settings = make_settings()
    h = harness_factory(settings)
    goal = "call the plumber about the kitchen tap"
    h.client.record_task(OWNER, "task-1", goal, "running")
    letter = _poison_first(h, QUEUE_TASKS)
    for name, value in (
        ("MEMJOBS_REDIS_URL", settings.redis.url),
        ("MEMJOBS_DATABASE_URL", settings.database.url),
        ("MEMJOBS_DATA_DIR", str(settings.data_dir)),
    ):
        monkeypatch.setenv(name, str(value))

    def run(*argv: str) -> tuple[int, str]:
        code = main(["dead", *argv])
        out = capsys.readouterr()
        return code, out.out + out.err

    code, listed = run("list")
    assert code == 0 and letter in listed and "record_task" in listed and KEY[:12] in listed
    code, shown = run("show", letter)
    assert code == 0 and "running" in shown
    code, revealed = run("show", letter, "--reveal", "--json")
    assert json.loads(revealed)["payload"]["goal"] == goal
    for private in (OWNER, KEY, goal, "task-1"):
        assert private not in listed + shown
    assert run("retry", letter) == (0, f"retried {letter}\n")
    assert run("retry", letter)[0] == 6  # gone: replayed once
    assert queue_stats(h.runtime.redis)[QUEUE_TASKS]["ready"] == 1
    _poison_first(h, QUEUE_TASKS)
    assert run("purge")[0] == 4  # purge what? refused
    assert run("purge", "--older-than", "1h", "--json") == (0, '{"purged": 1}\n')
    assert run("list") == (0, "no dead letters\n")
