"""The console's overview reads the record of retrying jobs the workers keep,
never the queued messages (issue 30, item 1): with thousands of messages
queued, ready and delayed, ``GET /console`` shows the retrying jobs by actor
and reason and issues no walk of Dramatiq's ``.msgs`` hashes: no HSCAN at all
(INFO commandstats, as a forget's are counted),
and no HSCAN/HGETALL naming a ``.msgs`` key among the commands MONITOR sees
(the page's other HGETALLs read memjobs' per-minute counts).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from dramatiq import Message

from memjobs_client import keys
from memjobs_client.contracts import ACTOR_EXTRACT, ACTOR_RECORD_TASK, QUEUE_TASKS
from memjobs_worker.observability.retrying import RetryingRecord
from tests.support.http import Api
from tests.support.redis_commands import WALKS, commands_of, monitored

READY, DELAYED = 3_000, 1_000


def queue_backlog(api: Api) -> None:
    broker = api.harness.broker
    for i in range(READY + DELAYED):
        message: Message[Any] = Message(
            queue_name=QUEUE_TASKS,
            actor_name=ACTOR_RECORD_TASK,
            args=({"owner_key": "0" * 64, "goal": f"goal {i}"},),
            kwargs={},
            options={},
        )
        broker.enqueue(message, delay=600_000 if i >= READY else None)


def test_the_overview_shows_retrying_jobs_from_the_record_and_walks_no_queued_messages(
    api_factory: Callable[..., Api],
) -> None:
    api = api_factory(worker=False)  # nothing consumes: the backlog stays queued
    client = api.harness.runtime.redis
    queue_backlog(api)
    assert client.hlen(keys.messages(QUEUE_TASKS)) == READY
    record = RetryingRecord(client)
    for i in range(3):
        record.add(f"extract-{i}", ACTOR_EXTRACT, "model_unavailable", 2, failed_ms=_now_ms() - i)
    record.add("task-0", ACTOR_RECORD_TASK, "OperationalError", 1, failed_ms=_now_ms())
    api.harness.broker.maintenance_chance = 0  # Dramatiq's housekeeping: not the page's
    assert api.http.get("/console").status_code == 200  # the session, connections, scripts

    page = None

    def load() -> None:
        nonlocal page
        page = api.http.get("/console")

    seen: list[str] = []
    issued = commands_of(client, lambda: seen.extend(monitored(client, load)))
    assert page is not None and page.status_code == 200, page
    text = re.sub(r"<[^>]+>", " ", page.text)
    assert re.search(r"retrying\s+extract_facts\s+model_unavailable\s+3\b", text), text
    assert re.search(r"retrying\s+record_task\s+OperationalError\s+1\b", text), text
    assert "4 jobs retrying" in text
    assert "hscan" not in issued, issued
    on_messages = [c for c in seen if ".msgs" in c and c.split(" ", 1)[0].strip('"').lower() in WALKS]
    assert on_messages == [], on_messages
    assert any("zrevrangebyscore" in c.lower() for c in seen), "MONITOR saw the page's reads"


def _now_ms() -> int:
    return int(time.time() * 1000)
