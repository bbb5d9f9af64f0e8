"""The console's jobs (issue 33, item 1): lists by state with search and pages,
a job's page, what each worker runs, the graphs, pausing a queue, confirmed
bulk actions on exactly the letters shown, and a live refresh that keeps the
ticked letters.

Rendering and the cost of a page are checked over plain HTTP; Chromium
(one browser for the module) is used where a browser is the point: the
confirmation dialog, the script's refresh, clicking through the pages. The
screenshots of these views are taken here (``UPDATE_CONSOLE_SCREENSHOTS=1``
copies them to ``docs/img/``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from dramatiq import Message
from dramatiq.middleware import SkipMessage

from memjobs_client import keys
from memjobs_client.contracts import ACTOR_EXTRACT, ACTOR_RECORD_TASK, QUEUE_REMEMBER, QUEUE_TASKS, owner_key
from memjobs_worker.cli import exits
from memjobs_worker.observability import jobstats, timeline
from memjobs_worker.observability.retrying import RetryingRecord
from memjobs_worker.observability.running import running_jobs
from memjobs_worker.ops.deadletters import DeadLetters
from memjobs_worker.ops.pauses import HonourPauses, PauseGate, QueuePauses
from memjobs_worker.ops.status import queue_stats
from tests.support.browser import keep_screenshot, launched_chromium
from tests.support.cli import cli_env, ok, run_cli
from tests.support.http import Api, remember
from tests.support.openai_server import FakeOpenAI, echo_facts_handler
from tests.support.polling import wait_for
from tests.support.redis_commands import monitored
from tests.support.redis_values import as_bytes

OWNER = "mei.jobs@example.com"
KEY = owner_key(OWNER)
OTHER_KEY = owner_key("somebody.else@example.com")
GOAL = "renew the passport before the trip to Kyoto"
TEXT = "I keep my bike in the shed behind the bakery"
QUEUED, DELAYED = 2_000, 500


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with launched_chromium() as launched:
        yield launched


@pytest.fixture
def api(api_factory: Callable[..., Api]) -> Api:
    """The API with no worker: nothing consumes, what is sent stays."""
    return api_factory(worker=False)


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    yield context.new_page()
    context.close()


def answer_next_dialog(page: Any, *, accept: bool) -> list[str]:
    """Accepts or dismisses the page's next dialog; the list returned gets its message."""
    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        if accept:
            dialog.accept()
        else:
            dialog.dismiss()

    page.once("dialog", answer)
    return asked


def shot(page: Any, name: str, tmp_path: Path, *, full_page: bool = True) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    keep_screenshot(path)


def task(i: int, key: str = KEY) -> Message[Any]:
    return Message(
        queue_name=QUEUE_TASKS,
        actor_name=ACTOR_RECORD_TASK,
        args=({"owner_key": key, "task_id": f"t-{i}", "goal": f"{GOAL} #{i}", "status": "running"},),
        kwargs={},
        options={},
    )


def dead_tasks(api: Api, n: int, key: str = KEY) -> list[str]:
    """``n`` task messages dead-lettered as a worker does it (its ``nack``): their broker ids."""
    broker, client = api.harness.broker, api.harness.runtime.redis
    ids = []
    for i in range(n):
        message = broker.enqueue(task(i, key))
        redis_id = message.options["redis_message_id"]
        client.lrem(keys.queue(QUEUE_TASKS), 1, redis_id)
        data = client.hget(keys.messages(QUEUE_TASKS), redis_id)
        client.hdel(keys.messages(QUEUE_TASKS), redis_id)
        client.zadd(keys.dead_letters(QUEUE_TASKS), {redis_id: int(time.time() * 1000) + i})
        client.hset(f"{keys.dead_letters(QUEUE_TASKS)}.msgs", redis_id, data)
        ids.append(redis_id)
    return ids


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def no_private_text(html: str) -> None:
    for private in (OWNER, KEY, OTHER_KEY, GOAL, TEXT):
        assert private not in html, f"{private!r} is on the page"


def first_group(pattern: str, html: str) -> str:
    """The first group of ``pattern``'s first match in ``html`` (which must have one)."""
    found = re.search(pattern, html)
    assert found is not None, pattern
    return found[1]


def rows(html: str) -> list[str]:
    """The message ids of a job list's rows."""
    return re.findall(r'<tr data-id="([^"]+)"', html)


# -- plain HTTP: a page of thousands, search, a job's page ------------------------------------


def test_a_page_of_jobs_reads_one_page_whatever_the_backlog_and_pages_on(api: Api) -> None:
    broker, client = api.harness.broker, api.harness.runtime.redis
    sent = [
        broker.enqueue(task(i, KEY if i % 2 else OTHER_KEY), delay=600_000 if i >= QUEUED else None)
        for i in range(QUEUED + DELAYED)
    ]
    assert api.http.get("/console/jobs").status_code == 200  # the session, connections
    broker.maintenance_chance = 0

    seen: list[str] = []
    reply: list[Any] = []
    seen.extend(monitored(client, lambda: reply.append(api.http.get("/console/jobs?state=queued"))))
    first = reply[0]
    assert first.status_code == 200
    assert len(rows(first.text)) == 50
    assert rows(first.text)[0] == sent[0].message_id  # FIFO: the oldest first
    no_private_text(first.text)
    # With thousands queued, a page read its own ids (an LRANGE of 50) and their data (one HMGET), no walk.
    reads = [
        c
        for c in seen
        if c.split(" ", 1)[0].lower() in {"lrange", "hmget", "hscan", "hgetall", "hvals", "hkeys", "sscan", "smembers"}
    ]
    ranges = [c for c in reads if c.lower().startswith("lrange")]
    assert f"LRANGE {keys.queue(QUEUE_TASKS)} 0 49" in ranges, reads
    assert all(c.endswith(" 0 49") for c in ranges), ranges  # the queues before it: empty
    msgs_reads = [c for c in reads if ".msgs" in c]
    assert [c.split(" ", 2)[:2] for c in msgs_reads] == [["HMGET", keys.messages(QUEUE_TASKS)]], reads
    assert len(msgs_reads[0].split()) == 2 + 50

    following = api.http.get(first_group(r'href="([^"]+)" rel="next"', first.text).replace("&amp;", "&"))
    assert rows(following.text) == [m.message_id for m in sent[50:100]]

    delayed = api.http.get("/console/jobs?state=delayed")
    assert len(rows(delayed.text)) >= 50 and set(rows(delayed.text)) <= {m.message_id for m in sent[QUEUED:]}
    assert "in 10 min" in text_of(delayed.text)

    # Search: a message id, an owner-key prefix, an actor; never the text.
    target = sent[1234]
    found = api.http.get(f"/console/jobs?state=queued&q={target.message_id[:10]}")
    assert rows(found.text) == [target.message_id]
    by_owner = api.http.get(f"/console/jobs?state=queued&q={KEY[:12]}")
    assert rows(by_owner.text) and all(m in {s.message_id for s in sent[1::2]} for m in rows(by_owner.text))
    assert rows(api.http.get("/console/jobs?state=queued&q=record_task").text)
    assert rows(api.http.get("/console/jobs?state=queued&q=passport").text) == []

    # A job's page: what it is, no text.
    shown = api.http.get(f"/console/jobs/{target.message_id}")
    assert shown.status_code == 200
    body = text_of(shown.text)
    assert "record_task" in body and QUEUE_TASKS in body and "queued" in body
    assert OTHER_KEY[:12] in body and "[redacted: " in body and "t-1234" not in body
    no_private_text(shown.text)
    assert api.http.get("/console/jobs/no-such-job").status_code == 404

    # Retrying: the workers' record, not the messages.
    record, now_ms = RetryingRecord(client), int(time.time() * 1000)
    for i in range(3):
        record.add(sent[i].message_id, ACTOR_RECORD_TASK, "OperationalError", i + 1, failed_ms=now_ms - i)
    retrying = api.http.get("/console/jobs?state=retrying")
    assert rows(retrying.text) == [m.message_id for m in sent[:3]]  # the newest failure first
    assert "OperationalError" in text_of(retrying.text)
    assert "failed 2 times" in text_of(api.http.get(f"/console/jobs/{sent[1].message_id}").text)


# -- Chromium --------------------------------------------------------------------------------


def test_the_jobs_pages_in_a_browser_list_search_page_and_open_a_job(api: Api, page: Any, tmp_path: Path) -> None:
    sent = [api.harness.broker.enqueue(task(i)) for i in range(120)]
    page.goto(f"{api.url}/console/jobs?refresh=300")
    assert page.locator("table.jobs tr[data-id]").count() == 50
    shot(page, "console-jobs", tmp_path, full_page=False)  # the first rows: the page is long
    page.get_by_role("link", name="next page").click()
    page.wait_for_url(re.compile(r"cursor="))
    assert page.locator("table.jobs tr[data-id]").first.get_attribute("data-id") == sent[50].message_id
    page.fill("input[name=q]", sent[77].message_id[:12])
    page.get_by_role("button", name="Search").click()
    page.wait_for_url(re.compile(r"q="))
    assert page.locator("table.jobs tr[data-id]").count() == 1
    page.locator("table.jobs tr[data-id] a").first.click()
    page.wait_for_url(re.compile(r"/console/jobs/[^?]+$"))
    body = page.inner_text("body")
    assert sent[77].message_id in body and "record_task" in body and KEY[:12] in body
    no_private_text(page.content())


def test_a_paused_queue_is_left_alone_by_a_real_worker_and_run_after_resume(
    api_factory: Callable[..., Api],
    page: Any,
) -> None:
    api = api_factory()  # with a worker consuming every queue
    client = api.harness.runtime.redis
    page.goto(f"{api.url}/console?refresh=300")
    page.locator(f"tr[data-queue={QUEUE_TASKS}]").get_by_role("button", name="Pause").click()
    page.wait_for_url(re.compile(r"done=paused"))
    assert QueuePauses(client).paused().keys() == {QUEUE_TASKS}
    assert "paused" in page.locator(f"tr[data-queue={QUEUE_TASKS}]").inner_text()
    # Obeyed within the gate's poll (1 s): wait until this worker process's gate has read it.
    gate = api.harness.broker.pause_gate
    assert gate is not None  # a worker broker's
    wait_for(lambda: gate.is_paused(QUEUE_TASKS), 10, "the worker's gate sees the pause")

    for i in range(5):
        api.harness.client.record_task(OWNER, f"t-{i}", GOAL, "running")
    source = remember(api, OWNER, TEXT)  # another queue: the worker is consuming
    wait_for(
        lambda: any(r.source_id == source for r in api.harness.store.list_sources(KEY)),
        30,
        "the remember taken while the tasks queue is paused",
    )
    deadline = time.monotonic() + 3  # well past a pause poll (1 s) and many idle fetches
    while time.monotonic() < deadline:
        stats = queue_stats(client)[QUEUE_TASKS]
        assert (stats["ready"], stats["in_flight"], stats["dead"]) == (5, 0, 0), stats
        time.sleep(0.1)

    page.locator(f"tr[data-queue={QUEUE_TASKS}]").get_by_role("button", name="Resume").click()
    page.wait_for_url(re.compile(r"done=resumed"))
    wait_for(
        lambda: queue_stats(client)[QUEUE_TASKS] == {"ready": 0, "delayed": 0, "in_flight": 0, "dead": 0},
        30,
        "the tasks run after resume",
    )
    wait_for(
        lambda: sum(jobstats.recent(client, 5).get(ACTOR_RECORD_TASK, {}).values()) >= 5, 30, "five tasks recorded"
    )
    outcomes = jobstats.recent(client, 5)[ACTOR_RECORD_TASK]
    assert sum(outcomes.values()) == 5 and not outcomes.keys() & {"retried", "dead_lettered", "skipped"}
    # The graphs count what ran (JobStats' flush), drawn as inline SVG.
    wait_for(lambda: sum(b.jobs for b in timeline.read(client, timeline.HOUR)) >= 6, 30, "counted")
    html = api.http.get("/console").text
    assert re.search(r'<svg class="chart jobs".*?<rect ', html, re.S)
    day = api.http.get("/console?window=day").text
    assert "Last day" in text_of(day) and re.search(r'<svg class="chart jobs".*?<rect ', day, re.S)
    assert "<script src" not in html and "http://" not in html.replace(api.url, "")


def test_a_message_handed_out_before_a_pause_goes_back_to_its_queue_untouched(api: Api) -> None:
    broker, client = api.harness.broker, api.harness.runtime.redis
    sent = broker.enqueue(task(0))
    consumer = broker.consume(QUEUE_TASKS, prefetch=1, timeout=100)
    handed = wait_for(lambda: next(consumer), 10, "the message fetched")
    assert queue_stats(client)[QUEUE_TASKS]["in_flight"] == 1
    QueuePauses(client).pause(QUEUE_TASKS)
    gate = PauseGate(client, poll_ms=0)
    with pytest.raises(SkipMessage):
        HonourPauses(gate).before_process_message(broker, handed)
    consumer.ack(handed)  # what the worker does after a skip
    consumer.close()
    assert queue_stats(client)[QUEUE_TASKS] == {"ready": 1, "delayed": 0, "in_flight": 0, "dead": 0}
    [(redis_id, data)] = client.hgetall(keys.messages(QUEUE_TASKS)).items()
    assert as_bytes(redis_id).decode() == sent.options["redis_message_id"]
    assert Message.decode(as_bytes(data)).options.get("retries") is None  # no attempt counted


def test_a_paused_consumer_fetches_nothing_and_puts_back_what_it_prefetched(api: Api) -> None:
    broker, client = api.harness.broker, api.harness.runtime.redis
    broker.pause_gate = PauseGate(client, poll_ms=0)  # reads the flag on every call
    for i in range(5):
        broker.enqueue(task(i))
    consumer = broker.consume(QUEUE_TASKS, prefetch=5, timeout=50)
    handed = wait_for(lambda: next(consumer), 10, "a message fetched")
    assert queue_stats(client)[QUEUE_TASKS]["in_flight"] == 5  # one handed out, four prefetched
    QueuePauses(client).pause(QUEUE_TASKS)
    assert next(consumer) is None
    assert queue_stats(client)[QUEUE_TASKS] == {"ready": 4, "delayed": 0, "in_flight": 1, "dead": 0}
    assert next(consumer) is None  # still nothing while paused
    QueuePauses(client).resume(QUEUE_TASKS)
    again = wait_for(lambda: next(consumer), 10, "a message fetched after resume")
    assert again.message_id != handed.message_id
    consumer.close()


def test_with_no_script_the_server_asks_before_a_bulk_purge(api: Api) -> None:
    client = api.harness.runtime.redis
    letters = dead_tasks(api, 2)
    page = api.http.get("/console/dead-letters")
    csrf = first_group(r'name="csrf" value="([A-Za-z0-9_-]+)"', page.text)
    form = {"csrf": csrf, "back": "/console/dead-letters", "id": [f"{QUEUE_TASKS}:{i}" for i in letters]}
    asked = api.http.post("/console/dead-letters/purge", data=form)
    assert asked.status_code == 200 and "Purge 2 dead letters?" in text_of(asked.text)
    assert DeadLetters(client).count()[QUEUE_TASKS] == 2  # nothing yet
    confirmed = api.http.post("/console/dead-letters/purge", data={**form, "confirmed": "yes"})
    assert confirmed.status_code == 303 and "purged%202" in confirmed.headers["location"]
    assert DeadLetters(client).count()[QUEUE_TASKS] == 0
    away = api.http.post(
        "/console/dead-letters/purge", data={**form, "confirmed": "yes", "back": "https://evil.example/"}
    )
    assert away.headers["location"].startswith("/console?")  # never another site


def test_purge_asks_first_and_deletes_only_the_letters_shown(api: Api, page: Any) -> None:
    client = api.harness.runtime.redis
    shown = dead_tasks(api, 3)
    page.goto(f"{api.url}/console/dead-letters?refresh=300")  # no refresh during the test
    assert page.locator("table.jobs tr[data-id]").count() == 3
    no_private_text(page.content())

    asked = answer_next_dialog(page, accept=False)
    page.get_by_role("button", name="Purge shown").click()
    wait_for(lambda: asked, 10, "the confirmation dialog")
    assert "Purge 3 dead letters" in asked[0]
    assert DeadLetters(client).count()[QUEUE_TASKS] == 3 and "done=" not in page.url  # dismissed

    arrived = dead_tasks(api, 2)  # new letters the page does not show
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Purge shown").click()
    page.wait_for_url(re.compile(r"done=purged"))
    assert "purged 3" in page.inner_text("body")
    left = {as_bytes(m).decode() for m in client.zrange(keys.dead_letters(QUEUE_TASKS), 0, -1)}
    assert left == set(arrived) and not left & set(shown)


def test_a_live_refresh_keeps_the_ticked_letters_and_retry_takes_only_them(api: Api, page: Any) -> None:
    client = api.harness.runtime.redis
    letters = dead_tasks(api, 3)
    page.goto(f"{api.url}/console/dead-letters?refresh=1&queue={QUEUE_TASKS}")
    page.locator(f"input.pick[value='{QUEUE_TASKS}:{letters[1]}']").check()
    read_at = page.locator("#live").get_attribute("data-read-at")
    arrived = dead_tasks(api, 1)  # the next refresh shows it
    page.wait_for_function(
        "n => document.querySelectorAll('table.jobs tr[data-id]').length === n", arg=4, timeout=30_000
    )
    assert page.locator("#live").get_attribute("data-read-at") != read_at  # swapped, not reloaded
    assert page.locator("select[name=queue]").input_value() == QUEUE_TASKS
    assert page.locator(f"input.pick[value='{QUEUE_TASKS}:{letters[1]}']").is_checked()
    assert not page.locator(f"input.pick[value='{QUEUE_TASKS}:{arrived[0]}']").is_checked()

    asked = answer_next_dialog(page, accept=True)
    page.get_by_role("button", name="Retry shown").click()
    page.wait_for_url(re.compile(r"done=retried"))
    assert "Retry 1 dead letters" in asked[0]  # the ticked one, not the four shown
    assert "retried 1 (skipped 0)" in page.inner_text("body")
    left = {as_bytes(m).decode() for m in client.zrange(keys.dead_letters(QUEUE_TASKS), 0, -1)}
    assert left == {letters[0], letters[2], arrived[0]}
    assert queue_stats(client)[QUEUE_TASKS]["ready"] == 1


def test_the_overview_shows_what_each_worker_runs_and_for_how_long(
    api_factory: Callable[..., Api],
    fake_model: FakeOpenAI,
    page: Any,
    tmp_path: Path,
) -> None:
    api = api_factory(
        memory_base_url=fake_model.base_url,
        memory_api_key="test-key",
        memory_model="fake-flash",
        model_timeout_ms=120_000,
    )  # it hangs until released
    client = api.harness.runtime.redis
    fake_model.set_chat_handler(echo_facts_handler)
    fake_model.hang_next("chat")
    remember(api, OWNER, TEXT)
    fake_model.wait_for_request("chat", 1)
    QueuePauses(client).pause(QUEUE_REMEMBER)
    _seed_timeline(client)
    try:
        wait_for(lambda: running_jobs(client), 30, "the extraction published as running")  # once a second
        page.goto(f"{api.url}/console?refresh=300")
        running = page.locator("section", has_text="Running now")
        assert ACTOR_EXTRACT in running.inner_text() and KEY[:12] in running.inner_text()
        assert re.search(r"\d+(\.\d)? s", running.inner_text())
        no_private_text(page.content())
        shot(page, "console-overview-live", tmp_path)
        message_id = running.locator("a").first.inner_text()
        in_flight = api.http.get("/console/jobs?state=in_flight").text
        [shown] = rows(in_flight)
        assert shown.startswith(message_id)
        detail = text_of(api.http.get(f"/console/jobs/{shown}").text)
        assert re.search(r"extract_facts · in flight · running on \S+ \(pid \d+\) for", detail), detail
    finally:
        fake_model.release()
        QueuePauses(client).resume(QUEUE_REMEMBER)
    wait_for(
        lambda: ACTOR_EXTRACT not in api.http.get("/console").text.split("Running now")[1].split("</section>")[0],
        30,
        "the extraction gone from the running jobs",
    )


def _seed_timeline(client: Any) -> None:
    """An hour of counts in the timeline's own buckets, so the screenshot's graphs
    have a shape (the jobs this test runs fill the current minute only)."""
    now = time.time()
    for back in range(1, 60):
        bucket = int(now // 60) - back
        jobs = 20 + (back * 7) % 30
        client.hset(
            keys.timeline(60, bucket),
            mapping={"jobs": jobs, "failed": (back % 9 == 0) * 3, "ms": jobs * (80 + back % 5 * 20)},
        )
        client.expire(keys.timeline(60, bucket), 600)


def test_the_cli_pauses_resumes_and_lists_the_same_flag(
    tmp_path: Path,
    redis_url: str,
    database_url: str,
) -> None:
    env = cli_env(tmp_path / "data", MEMJOBS_REDIS_URL=redis_url, MEMJOBS_DATABASE_URL=database_url)
    client = redis.Redis.from_url(redis_url)
    assert ok(run_cli(env, "queue", "pause", QUEUE_TASKS, "--json")).json() == {"queue": QUEUE_TASKS, "paused": True}
    assert QueuePauses(client).paused().keys() == {QUEUE_TASKS}
    [row] = ok(run_cli(env, "queue", "list", "--json")).json()
    assert row["queue"] == QUEUE_TASKS and row["paused_for_s"] >= 0
    assert ok(run_cli(env, "queue", "resume", QUEUE_TASKS, "--json")).json()["resumed"] is True
    assert QueuePauses(client).paused() == {}
    assert run_cli(env, "queue", "pause", "no_such_queue").code == exits.USAGE
    client.close()
