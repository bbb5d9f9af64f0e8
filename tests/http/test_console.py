"""The web console in a real browser (Debian's chromium, headless, driven by
Playwright), and the dead-letter routes of the HTTP API.

The scenario of issue 25: an extraction that exhausted its retries while the
model was down is listed without text, shown in the console, replayed from
its Retry button once the model is back, and its sources end learned exactly
once. Screenshots of the main views are kept under the test's tmp dir
(``console-screenshots``); with ``UPDATE_CONSOLE_SCREENSHOTS=1`` they are also
copied to ``docs/img/``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dramatiq import Message

from memjobs_client.contracts import ACTOR_RECORD_TASK, QUEUE_EXTRACT, QUEUE_TASKS, owner_key
from memjobs_worker.ops.deadletters import DeadLetters
from memjobs_worker.ops.status import queue_stats
from tests.support.browser import keep_screenshot, launched_chromium
from tests.support.http import GATEWAY_TOKEN, HOST_TOKEN, Api, problem, remember
from tests.support.openai_server import FakeOpenAI, echo_facts_handler
from tests.support.polling import wait_for

OWNER = "erin.console@example.com"
KEY = owner_key(OWNER)
TEXTS = ["I park my scooter behind the library", "我周五晚上练书法"]
TASK_GOAL = "book a table for the anniversary"


@pytest.fixture
def browser() -> Iterator[Any]:
    with launched_chromium() as launched:
        yield launched


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Any, str], Path]:
    directory = tmp_path_factory.mktemp("console-screenshots")

    def take(page: Any, name: str) -> Path:
        path = directory / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        keep_screenshot(path)
        return path

    return take


def model_api(api_factory: Callable[..., Api], fake_model: FakeOpenAI, **overrides: Any) -> Api:
    return api_factory(
        memory_base_url=fake_model.base_url,
        memory_api_key="test-key",
        memory_model="fake-flash",
        max_retries=2,
        model_max_attempts=1,
        min_backoff_ms=20,
        max_backoff_ms=50,
        outage_retry_budget_ms=0,  # the model down past the outage budget: counted
        **overrides,
    )


def dead_scenario(api: Api, fake_model: FakeOpenAI) -> list[str]:
    """The model is down: the owner's extraction dies; a crafted task message dies too."""
    fake_model.fail_next("chat", 500, count=100_000)
    ids = [remember(api, OWNER, t) for t in TEXTS]
    api.harness.broker.enqueue(
        Message(
            queue_name=QUEUE_TASKS,
            actor_name=ACTOR_RECORD_TASK,
            args=({"owner_key": KEY, "goal": TASK_GOAL},),
            kwargs={},
            options={},
        )
    )
    redis = api.harness.runtime.redis
    wait_for(
        lambda: queue_stats(redis)[QUEUE_EXTRACT]["dead"] == 1 and queue_stats(redis)[QUEUE_TASKS]["dead"] == 1,
        60,
        "both jobs dead-lettered",
    )
    return ids


def no_private_text(html: str) -> None:
    for private in (OWNER, KEY, TASK_GOAL, *TEXTS):
        assert private not in html, f"{private!r} is on the page"


def states(api: Api) -> dict[str, str]:
    return {r.source_id: r.state for r in api.harness.store.list_sources(KEY)}


def test_the_console_shows_a_dead_extraction_and_its_retry_button_learns_it_once(
    api_factory: Callable[..., Api],
    fake_model: FakeOpenAI,
    browser: Any,
    shots: Callable[[Any, str], Path],
) -> None:
    api = model_api(api_factory, fake_model)
    ids = dead_scenario(api, fake_model)
    page = browser.new_page(viewport={"width": 1360, "height": 900})
    page.goto(f"{api.url}/console")
    body = page.inner_text("body")
    assert "queues" in body.lower() and "model_unavailable" in body and "invalid_payload" in body
    assert re.search(r"memjobs_extract\s+0\s+0\s+0\s+1", body), body
    assert "pending" in body and "all queues" in body  # sources by state; the worker's pool
    no_private_text(page.content())
    shots(page, "console-overview")

    page.goto(f"{api.url}/console/dead-letters")
    no_private_text(page.content())
    shots(page, "console-dead-letters")

    # The letter's own page: its attempts and reason, no text.
    page.locator("tr", has_text="extract_facts").locator("a").first.click()
    page.wait_for_url(re.compile(r"/console/jobs/[^?]+$"))
    detail = page.inner_text("body")
    assert "extract_facts" in detail and "model_unavailable" in detail and KEY[:12] in detail
    assert re.search(r"attempts\s+3\b", detail), detail  # the first try and max_retries=2
    no_private_text(page.content())
    shots(page, "console-job")
    page.goto(f"{api.url}/console/dead-letters")

    fake_model.reset()
    fake_model.set_chat_handler(echo_facts_handler)  # the model is back
    page.locator("tr", has_text="extract_facts").get_by_role("button", name="Retry").click()
    page.wait_for_url(re.compile(r"/console/dead-letters\?done=retried"))
    assert "retried 1" in page.inner_text("body")
    wait_for(lambda: states(api) == {sid: "learned" for sid in ids}, 60, "the sources learned")
    learned = [m.text for m in api.harness.pipeline.memories(KEY)]
    assert sorted(learned) == sorted(TEXTS)
    page.goto(f"{api.url}/console")
    shots(page, "console-after-retry")
    no_private_text(page.content())
    page.close()


def test_a_console_post_without_the_csrf_token_is_refused(
    api_factory: Callable[..., Api],
    browser: Any,
) -> None:
    api = api_factory(worker=False)
    api.harness.client.record_task(OWNER, "task-7", TASK_GOAL, "running")
    redis = api.harness.runtime.redis
    [letter_id] = _poison_tasks(api)
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{api.url}/console/dead-letters")
    cookies = {c["name"]: c["value"] for c in context.cookies()}
    cookie = context.cookies()[0]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    with httpx.Client(base_url=api.url, cookies=cookies) as http:
        form = {"back": "dead"}
        refused = http.post(f"/console/dead-letters/{letter_id}/purge", data=form)
        assert refused.status_code == 403 and "CSRF" in refused.text
        assert http.post(f"/console/dead-letters/{letter_id}/purge", data={**form, "csrf": "0" * 64}).status_code == 403
        assert DeadLetters(redis).count()[QUEUE_TASKS] == 1
        done = http.post(f"/console/dead-letters/{letter_id}/purge", data={**form, "csrf": csrf})
        assert done.status_code == 303 and "purged%201" in done.headers["location"]
    with httpx.Client(base_url=api.url) as stranger:  # no session at all
        assert stranger.post(f"/console/dead-letters/{letter_id}/purge", data={"csrf": csrf}).status_code == 403
    assert DeadLetters(redis).count()[QUEUE_TASKS] == 0
    context.close()


def test_with_tokens_the_console_asks_for_the_host_token(
    api_factory: Callable[..., Api],
    browser: Any,
    shots: Callable[[Any, str], Path],
) -> None:
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    assert api.http.get("/console").status_code == 303
    page = browser.new_page(viewport={"width": 1100, "height": 520})
    page.goto(f"{api.url}/console")
    assert page.url.endswith("/console/login")
    shots(page, "console-login")
    page.fill("input[name=token]", GATEWAY_TOKEN)
    page.click("button")
    assert "not the host token" in page.inner_text("body")
    page.fill("input[name=token]", HOST_TOKEN)
    page.click("button")
    page.wait_for_url(f"{api.url}/console")
    assert "queues" in page.inner_text("body").lower()
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(re.compile(r"/console/login$"))
    page.close()


def _poison_tasks(api: Api) -> list[str]:
    """Move the tasks queue's messages to its dead letters, as a worker would."""
    from memjobs_client import keys

    redis = api.harness.runtime.redis
    moved = []
    while (redis_id := redis.lpop(keys.queue(QUEUE_TASKS))) is not None:
        assert isinstance(redis_id, bytes)  # one id (no count given), as the client returns it
        data = redis.hget(keys.messages(QUEUE_TASKS), redis_id)
        redis.hdel(keys.messages(QUEUE_TASKS), redis_id)
        redis.zadd(keys.dead_letters(QUEUE_TASKS), {redis_id: 1_000})
        redis.hset(f"{keys.dead_letters(QUEUE_TASKS)}.msgs", redis_id, data)
        moved.append(redis_id.decode())
    return moved


# -- the HTTP routes ------------------------------------------------------------------------


def test_the_dead_letter_routes_need_the_host_token_and_never_show_text(
    api_factory: Callable[..., Api],
) -> None:
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    api.harness.client.record_task(OWNER, "task-9", TASK_GOAL, "running")
    [letter_id] = _poison_tasks(api)
    problem(api.get("/v1/ops/dead-letters"), "unauthorized", 401)
    problem(api.get("/v1/ops/dead-letters", token=GATEWAY_TOKEN), "forbidden", 403)
    listed = api.get("/v1/ops/dead-letters", token=HOST_TOKEN)
    assert listed.status_code == 200
    [row] = listed.json()["dead_letters"]
    assert row["redis_id"] == letter_id and row["owner"] == KEY[:12]
    assert listed.json()["counts"][QUEUE_TASKS] == 1
    shown = api.get(f"/v1/ops/dead-letters/{row['message_id']}", token=HOST_TOKEN)
    no_private_text(listed.text + shown.text)
    assert shown.json()["payload"]["status"] == "running"
    revealed = api.get(f"/v1/ops/dead-letters/{letter_id}?reveal=true", token=HOST_TOKEN)
    assert revealed.json()["payload"]["goal"] == TASK_GOAL
    problem(api.get("/v1/ops/dead-letters/nope", token=HOST_TOKEN), "not_found", 404)
    problem(api.post("/v1/ops/dead-letters/purge", {}, token=HOST_TOKEN), "validation", 422)
    retried = api.post(f"/v1/ops/dead-letters/{letter_id}/retry", {}, token=HOST_TOKEN)
    assert retried.json() == {"retried": 1, "skipped": 0}
    problem(api.post(f"/v1/ops/dead-letters/{letter_id}/retry", {}, token=HOST_TOKEN), "not_found", 404)
    assert queue_stats(api.harness.runtime.redis)[QUEUE_TASKS]["ready"] == 1
    _poison_tasks(api)
    purged = api.post("/v1/ops/dead-letters/purge", {"all": True, "queue": QUEUE_TASKS}, token=HOST_TOKEN)
    assert purged.json() == {"purged": 1}
    assert api.post("/v1/ops/dead-letters/retry", {"all": True}, token=HOST_TOKEN).json() == {
        "retried": 0,
        "skipped": 0,
    }
