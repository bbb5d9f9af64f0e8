"""Session digest and recall on real PostgreSQL and the fake model server: the
50-character gist, secrets kept from the model, live task status at recall,
once-per-session digests and exact retention with an injected clock."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from memjobs_client.contracts import DigestSession, TaskRef, Turn, owner_key
from memjobs_client.errors import ModelUnavailable, PermanentError, StaleFencingToken
from memjobs_worker.db import create_db_engine
from memjobs_worker.model_client import ChatModel
from memjobs_worker.sessions import ModelOutputInvalid, SessionStore, digest_session, run_digest
from tests.support.clocks import ManualClock
from tests.support.openai_server import FakeOpenAI

KEY = owner_key("alice@example.com")
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SECRET = "sk-live9Qw3Er7Ty1Ui5Op2As8Df4Gh6Jk"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def store(database_url: str, clock: ManualClock) -> Iterator[SessionStore]:
    engine = create_db_engine(database_url)
    yield SessionStore(engine, clock=clock)
    engine.dispose()


@pytest.fixture
def model(fake_model: FakeOpenAI) -> Iterator[ChatModel]:
    chat = ChatModel(base_url=fake_model.base_url, api_key="k", model="m", timeout_ms=5000, max_attempts=1)
    yield chat
    chat.close()


def reply(topic: str, gist: str) -> str:
    return json.dumps({"topic": topic, "gist": gist}, ensure_ascii=False)


def session(session_id: str = "s1", *texts: str, tasks: tuple[TaskRef, ...] = ()) -> DigestSession:
    turns = texts or ("明天早上七点叫我起床", "好的，已经设好七点的闹钟")
    return DigestSession(
        owner_key=KEY,
        session_id=session_id,
        tasks=tasks,
        transcript=tuple(Turn(role="user" if i % 2 == 0 else "assistant", text=t, ts=T0) for i, t in enumerate(turns)),
    )


def statuses(store: SessionStore, now: datetime | None = None) -> dict[str, tuple[str, bool]]:
    [recalled] = store.recall_sessions(KEY, days=7, now=now)
    return {t.task_id: (t.status, t.status_known) for t in recalled.tasks}


# -- the digest ------------------------------------------------------------------


def _cut_at_boundary(full: str, gist: str) -> bool:
    """``gist`` is ``full`` cut where a phrase or word ends (or ``full`` itself)."""
    full = " ".join(full.split())
    if gist == full:
        return True
    rest = full[len(gist) :]
    return full.startswith(gist) and (rest[0] in " ，。、；：！？,.;:!?" or gist[-1] in "。！？.!?")


def test_chinese_gist_is_cut_where_a_phrase_ends(model: ChatModel, fake_model: FakeOpenAI) -> None:
    gist = (
        "我们讨论了搬家到杭州以后的生活安排，包括租房、通勤和孩子上学的问题，还约好下周和房东见面谈一谈合同里押金的细节"
    )
    fake_model.queue_chat_replies(reply("搬家", gist))
    digest = digest_session(model, session())
    assert len(gist) > 50 and 25 <= len(digest.gist) <= 50
    assert _cut_at_boundary(gist, digest.gist)
    assert digest.gist == "我们讨论了搬家到杭州以后的生活安排，包括租房、通勤和孩子上学的问题"
    assert len(fake_model.requests_for("chat")) == 1  # a boundary in reach: no second call


def test_english_gist_is_cut_at_a_word_boundary(model: ChatModel, fake_model: FakeOpenAI) -> None:
    gist = "Planned the move to Hangzhou next month and compared three flats near the office"
    fake_model.queue_chat_replies(reply("moving", gist))
    digest = digest_session(model, session())
    assert len(digest.gist) <= 50 and _cut_at_boundary(gist, digest.gist)
    assert digest.gist == "Planned the move to Hangzhou next month and"


def test_gist_without_a_boundary_in_reach_is_asked_for_again(model: ChatModel, fake_model: FakeOpenAI) -> None:
    fake_model.queue_chat_replies(reply("闹钟", "闹钟设置" * 20), reply("闹钟", "设好了明早七点的闹钟"))
    digest = digest_session(model, session())
    assert digest.gist == "设好了明早七点的闹钟"
    second = fake_model.requests_for("chat")[1].json
    assert second is not None and "at most 50 characters" in second["messages"][-1]["content"]


def test_gist_still_too_long_after_asking_again_is_cut_after_a_particle(
    model: ChatModel, fake_model: FakeOpenAI
) -> None:
    long = "我们讨论了去杭州的行程" * 8  # no punctuation, no space: no phrase end in reach
    fake_model.queue_chat_replies(reply("旅行计划" * 20, long), reply("旅行", long))
    digest = digest_session(model, session())
    assert len(digest.gist) <= 50 and long.startswith(digest.gist)
    assert digest.gist[-1] in "了的"  # never in the middle of 杭州 or 行程
    assert len(digest.topic) <= 40 and len(fake_model.requests_for("chat")) == 2


def test_secret_in_the_transcript_never_reaches_the_model_server(model: ChatModel, fake_model: FakeOpenAI) -> None:
    fake_model.queue_chat_replies(reply("API key", "用户提到了一个密钥"))
    digest_session(model, session("s1", f"我的 key 是 {SECRET}，帮我记一下", "我的密码是739421", "好的"))
    sent = fake_model.all_text_sent()
    assert "我的 key 是" in sent  # the transcript went, without its secrets
    assert SECRET not in sent and "739421" not in sent


def test_secret_in_the_model_reply_is_not_kept(model: ChatModel, fake_model: FakeOpenAI) -> None:
    fake_model.queue_chat_replies(reply(f"key {SECRET}", "用户的密码是739421"))
    digest = digest_session(model, session())
    assert SECRET not in digest.topic and "739421" not in digest.gist


@pytest.mark.parametrize(
    "bad",
    [
        "当然！这次对话讲的是闹钟。",
        json.dumps({"topic": "闹钟", "summary": "设了闹钟"}),
        json.dumps(["闹钟", "设了闹钟"]),
        json.dumps({"topic": "", "gist": 3}),
    ],
)
def test_malformed_reply_is_asked_again_once_then_refused(model: ChatModel, fake_model: FakeOpenAI, bad: str) -> None:
    fake_model.queue_chat_replies(bad, bad)
    with pytest.raises(ModelOutputInvalid) as caught:
        digest_session(model, session())
    assert isinstance(caught.value, PermanentError)  # not retried by Dramatiq for minutes
    assert caught.value.reason == "model_output_invalid"
    assert "闹钟" not in str(caught.value)  # names the problem, never the reply
    assert len(fake_model.requests_for("chat")) == 2


def test_a_malformed_reply_followed_by_a_good_one_is_used(model: ChatModel, fake_model: FakeOpenAI) -> None:
    fake_model.queue_chat_replies('```json\n{"topic": "闹钟"}\n```', "```json\n" + reply("闹钟", "设了闹钟") + "\n```")
    assert digest_session(model, session()).gist == "设了闹钟"


def test_digest_freezes_task_goals_only(model: ChatModel, fake_model: FakeOpenAI) -> None:
    fake_model.queue_chat_replies(reply("闹钟", "设了七点的闹钟"))
    tasks = (TaskRef(task_id="t1", goal="设置七点闹钟"),)
    digest = digest_session(model, session(tasks=tasks))
    assert digest.task_goals == list(tasks)


# -- once per session ----------------------------------------------------------

LEASE = timedelta(seconds=30)


def test_second_digest_of_a_session_is_a_duplicate_without_a_model_call(
    store: SessionStore, model: ChatModel, fake_model: FakeOpenAI
) -> None:
    fake_model.queue_chat_replies(reply("闹钟", "设了七点的闹钟"), reply("别的", "不该出现"))
    assert run_digest(store, model, session()) == "stored"
    assert run_digest(store, model, session()) == "duplicate"
    assert len(fake_model.requests_for("chat")) == 1
    assert [r.gist for r in store.recall_sessions(KEY, days=1)] == ["设了七点的闹钟"]


def test_a_run_held_under_a_live_lease_is_not_run_again(
    store: SessionStore, model: ChatModel, fake_model: FakeOpenAI, clock: ManualClock
) -> None:
    held = store.runs.claim(KEY, "s1", "digest", LEASE)  # another worker is on it
    assert held is not None
    assert run_digest(store, model, session()) == "busy"  # the actor reports it as a duplicate
    assert fake_model.requests_for("chat") == []


def test_run_whose_holder_died_is_taken_over_after_its_lease(
    store: SessionStore, model: ChatModel, fake_model: FakeOpenAI, clock: ManualClock
) -> None:
    dead = store.runs.claim(KEY, "s1", "digest", LEASE)  # the worker died after claiming
    assert dead is not None
    clock.advance(LEASE + timedelta(milliseconds=1))
    fake_model.queue_chat_replies(reply("闹钟", "设了七点的闹钟"))
    assert run_digest(store, model, session()) == "stored"
    assert store.runs.claim(KEY, "s1", "digest", LEASE) is None
    [record] = store.run_records(KEY, 1)
    assert (record.state, record.attempts) == ("done", 2)
    # The dead holder wakes up: its late result is refused, the stored digest stays.
    with pytest.raises(StaleFencingToken):
        store.save_digest(KEY, "s1", "迟到", "迟到的结果", [], claim=dead)
    assert [r.gist for r in store.recall_sessions(KEY, days=1)] == ["设了七点的闹钟"]


def test_model_down_gives_the_run_back_for_the_retry(
    store: SessionStore, model: ChatModel, fake_model: FakeOpenAI
) -> None:
    fake_model.fail_next("chat", 503)
    with pytest.raises(ModelUnavailable):
        run_digest(store, model, session())
    [record] = store.run_records(KEY, 1)
    assert (record.state, record.reason) == ("running", "model_unavailable")
    fake_model.queue_chat_replies(reply("闹钟", "设了七点的闹钟"))
    assert run_digest(store, model, session()) == "stored"  # at once, not after the lease


def test_malformed_output_ends_the_run_failed_with_its_reason(
    store: SessionStore, model: ChatModel, fake_model: FakeOpenAI
) -> None:
    fake_model.queue_chat_replies("not json", "still not json", reply("闹钟", "设了七点的闹钟"))
    assert run_digest(store, model, session()) == "model_output_invalid"
    [record] = store.run_records(KEY, 1)
    assert (record.kind, record.state, record.reason) == ("digest", "failed", "model_output_invalid")
    assert run_digest(store, model, session()) == "duplicate"  # failed is final: no third call
    assert len(fake_model.requests_for("chat")) == 2


def test_worker_redacts_a_hand_written_payload_again(
    store: SessionStore, model: ChatModel, fake_model: FakeOpenAI
) -> None:
    fake_model.queue_chat_replies(reply("任务", "派了一个任务"))
    goal = TaskRef(task_id="t1", goal=f"把 {SECRET} 发给老王")
    payload = session("s1", f"我的 key 是 {SECRET}", "好的", tasks=(goal,))
    assert run_digest(store, model, payload) == "stored"
    assert SECRET not in fake_model.all_text_sent()
    [recalled] = store.recall_sessions(KEY, days=1)
    assert recalled.tasks[0].goal == "把 [REDACTED] 发给老王"


# -- recall ------------------------------------------------------------------------


def test_recall_lists_sessions_newest_first_within_the_window(store: SessionStore, clock: ManualClock) -> None:
    for day, sid in enumerate(["old", "mid", "new"]):
        store.save_digest(KEY, sid, f"topic {sid}", "gist", [], now=T0 + timedelta(days=day * 5))
    store.save_digest(owner_key("bob"), "other", "bob's", "gist", [], now=T0 + timedelta(days=10))
    clock.now = T0 + timedelta(days=10)
    assert [r.session_id for r in store.recall_sessions(KEY, days=7)] == ["new", "mid"]


def test_recall_reads_task_status_live_from_the_ledger(store: SessionStore, clock: ManualClock) -> None:
    store.save_digest(KEY, "s1", "闹钟", "设了闹钟", [TaskRef(task_id="t1", goal="设置七点闹钟")])
    store.record_task(KEY, "t1", "设置七点闹钟", "running")
    assert statuses(store) == {"t1": ("running", True)}
    clock.advance(timedelta(minutes=5))
    store.record_task(KEY, "t1", "设置七点闹钟", "succeeded")
    assert statuses(store) == {"t1": ("succeeded", True)}


def test_recall_says_dispatched_once_the_task_record_expired(store: SessionStore, clock: ManualClock) -> None:
    store.save_digest(KEY, "s1", "闹钟", "设了闹钟", [TaskRef(task_id="t1", goal="设置七点闹钟")])
    store.record_task(KEY, "t1", "设置七点闹钟", "succeeded")
    clock.advance(timedelta(days=3, seconds=1))
    assert store.apply_retention().tasks_deleted == 1
    [recalled] = store.recall_sessions(KEY, days=7)
    [task] = recalled.tasks
    assert (task.task_id, task.goal, task.status, task.status_known) == ("t1", "设置七点闹钟", "dispatched", False)


def test_status_report_for_an_unknown_task_creates_it(store: SessionStore) -> None:
    store.save_digest(KEY, "s1", "闹钟", "设了闹钟", [TaskRef(task_id="t9", goal="订机票")])
    assert statuses(store) == {"t9": ("dispatched", False)}
    store.record_task(KEY, "t9", "订机票", "failed")
    assert statuses(store) == {"t9": ("failed", True)}


# -- retention -----------------------------------------------------------------------


def test_retention_deletes_exactly_the_digests_older_than_90_days(store: SessionStore, clock: ManualClock) -> None:
    store.save_digest(KEY, "kept", "t", "g", [], now=T0 - timedelta(days=89, hours=23))
    store.save_digest(KEY, "gone", "t", "g", [], now=T0 - timedelta(days=90, seconds=1))
    assert store.apply_retention().digests_deleted == 1
    assert [r.session_id for r in store.recall_sessions(KEY, days=90)] == ["kept"]


def test_retention_deletes_terminal_tasks_3_days_after_they_ended(store: SessionStore, clock: ManualClock) -> None:
    store.save_digest(KEY, "s1", "t", "g", [TaskRef(task_id=t, goal=t) for t in ("done", "ended", "busy")])
    store.record_task(KEY, "busy", "busy", "running")
    store.record_task(KEY, "done", "done", "succeeded")
    clock.advance(timedelta(hours=1))
    store.record_task(KEY, "ended", "ended", "cancelled")
    clock.advance(timedelta(days=3, seconds=1) - timedelta(hours=1))
    assert store.apply_retention().tasks_deleted == 1
    assert statuses(store) == {"done": ("dispatched", False), "ended": ("cancelled", True), "busy": ("running", True)}


def test_retention_never_deletes_a_task_that_is_not_terminal(store: SessionStore, clock: ManualClock) -> None:
    store.record_task(KEY, "t1", "goal", "succeeded")
    clock.advance(timedelta(minutes=1))
    store.record_task(KEY, "t1", "goal", "running")  # left the terminal state
    store.record_task(KEY, "t2", "goal", "dispatched")
    clock.advance(timedelta(days=365))
    assert store.apply_retention().tasks_deleted == 0


def test_repeated_terminal_report_does_not_extend_retention(store: SessionStore, clock: ManualClock) -> None:
    store.record_task(KEY, "t1", "goal", "succeeded")
    clock.advance(timedelta(days=2))
    store.record_task(KEY, "t1", "goal", "succeeded")  # a redelivered report
    clock.advance(timedelta(days=1, seconds=1))
    assert store.apply_retention().tasks_deleted == 1


def test_retention_deletes_run_records_older_than_90_days(store: SessionStore, clock: ManualClock) -> None:
    for sid, kind in (("gone", "digest"), ("kept", "consolidate")):
        claim = store.runs.claim(KEY, sid, kind, LEASE)  # type: ignore[arg-type]
        assert claim is not None
        store.runs.finish(claim)
        clock.advance(timedelta(hours=1))
    clock.advance(timedelta(days=90, seconds=1) - timedelta(hours=2))
    report = store.apply_retention()
    assert (report.digests_deleted, report.tasks_deleted, report.runs_deleted) == (0, 0, 1)
    assert store.runs.claim(KEY, "kept", "consolidate", LEASE) is None  # still recorded as done
    assert store.runs.claim(KEY, "gone", "digest", LEASE) is not None  # its record is gone: a fresh run
