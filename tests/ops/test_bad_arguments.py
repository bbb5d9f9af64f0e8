"""Bad arguments to the producer: a clear, bounded ``InvalidPayload``, fast, and
nothing enqueued.  Wrong types, ``None`` where a list is expected, text that is
not valid (lone surrogates, NUL), huge inputs; and the worker's ``parse`` says
the same words as the producer.  A real Redis (the test session's own)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from memjobs_client import contracts
from memjobs_client.client import MemjobsClient
from memjobs_client.contracts import QUEUES, owner_key, source_id_for
from memjobs_client.errors import InvalidPayload, MemjobsError
from memjobs_worker.jobs import parse

OWNER = "dave@example.com"
KEY = owner_key(OWNER)
TS = "2026-11-30T10:00:00Z"
TURNS = [{"role": "user", "text": "set an alarm for seven", "ts": TS}]
DOC = {"doc_id": "d1", "title": "notes", "text": "tea notes"}
#: A refused call must say why in a few lines, not one line per character.
MAX_MESSAGE_CHARS = 1000


@pytest.fixture
def client(redis_url: str) -> Iterator[MemjobsClient]:
    c = MemjobsClient(redis_url, consolidation_enabled=True, digest_enabled=True)
    yield c
    c.close()


def nothing_queued(redis_url: str) -> bool:
    r = redis.Redis.from_url(redis_url)
    try:
        return all(r.llen(f"memjobs:{q}") == 0 and r.hlen(f"memjobs:{q}.msgs") == 0 for q in QUEUES)
    finally:
        r.close()


#: The calls break the client's argument types on purpose, so they take it untyped.
CASES: dict[str, tuple[Callable[[Any], Any], str]] = {
    # (call, words the message must hold)
    "owner_none": (lambda c: c.remember(None, "tea"), "owner_id must be a string, not NoneType"),
    "owner_surrogate": (lambda c: c.remember("dave\ud800", "tea"), "owner_id is not valid text"),
    "owner_surrogate_end_session": (lambda c: c.end_session("\udfff", "s1", TURNS), "not valid text"),
    "text_surrogate": (lambda c: c.remember(OWNER, "tea \ud83d"), "text: not valid text: a lone surrogate"),
    "text_nul": (lambda c: c.remember(OWNER, "tea\x00time"), "text: not valid text: a NUL"),
    "session_id_surrogate": (lambda c: c.remember(OWNER, "tea", session_id="s\ud800"), "session_id"),
    "transcript_none": (lambda c: c.end_session(OWNER, "s1", None), "transcript: must be a list, not NoneType"),
    "transcript_string": (lambda c: c.end_session(OWNER, "s1", "hello"), "transcript: must be a list, not str"),
    "transcript_dict": (lambda c: c.end_session(OWNER, "s1", TURNS[0]), "transcript: must be a list, not dict"),
    "transcript_turn_surrogate": (
        lambda c: c.end_session(OWNER, "s1", [{**TURNS[0], "text": "hi \ud800"}]),
        "not valid text",
    ),
    "transcript_turn_not_a_mapping": (lambda c: c.end_session(OWNER, "s1", [42]), "transcript.0"),
    "tasks_none": (lambda c: c.end_session(OWNER, "s1", TURNS, None), "tasks: must be a list, not NoneType"),
    "task_goal_surrogate": (
        lambda c: c.end_session(OWNER, "s1", TURNS, [{"task_id": "t", "goal": "\ud800"}]),
        "not valid text",
    ),
    "record_task_goal_none": (lambda c: c.record_task(OWNER, "t1", None, "running"), "goal"),
    "record_task_goal_surrogate": (lambda c: c.record_task(OWNER, "t1", "buy \ud800", "running"), "goal"),
    "record_task_status_unknown": (lambda c: c.record_task(OWNER, "t1", "buy tea", "done"), "status"),
    "documents_none": (
        lambda c: c.reindex_knowledge(OWNER, None, consent=True),
        "documents: must be a list, not NoneType",
    ),
    "documents_string": (
        lambda c: c.reindex_knowledge(OWNER, "/srv/a.md", consent=True),
        "documents: must be a list, not str",
    ),
    "document_int": (lambda c: c.reindex_knowledge(OWNER, [42], consent=True), "documents.0"),
    "document_text_surrogate": (
        lambda c: c.reindex_knowledge(OWNER, [{**DOC, "text": "\ud800"}], consent=True),
        "not valid text",
    ),
    "document_path_nul": (lambda c: c.reindex_knowledge(OWNER, ["/srv/a\x00.md"], consent=True), "NUL"),
    "allowed_roots_none": (
        lambda c: c.reindex_knowledge(OWNER, [DOC], consent=True, allowed_roots=None),
        "allowed_roots: must be a list",
    ),
    "allowed_roots_string": (
        lambda c: c.reindex_knowledge(OWNER, [DOC], consent=True, allowed_roots="/srv"),
        "allowed_roots: must be a list, not str",
    ),
    "send_unknown_actor": (lambda c: c.send("nope", {}), "unknown actor"),
    "send_bad_delay": (lambda c: c.send(contracts.ACTOR_EXTRACT, {"owner_key": KEY}, delay_ms=-5), "delay_ms"),
    "send_payload_not_a_mapping": (lambda c: c.send(contracts.ACTOR_EXTRACT, [KEY]), "expected an object"),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_bad_argument_is_invalid_payload_saying_what_and_nothing_is_enqueued(
    case: str, client: MemjobsClient, redis_url: str
) -> None:
    call, words = CASES[case]
    with pytest.raises(InvalidPayload) as refused:
        call(client)
    assert words in str(refused.value)
    assert len(str(refused.value)) < MAX_MESSAGE_CHARS
    assert nothing_queued(redis_url)


HUGE: dict[str, Callable[[Any], Any]] = {
    "transcript_as_1mb_string": lambda c: c.end_session(OWNER, "s1", "x" * 1_000_000),
    "1mb_text": lambda c: c.remember(OWNER, "tea " * 250_000),
    "1mb_text_with_surrogate": lambda c: c.remember(OWNER, "tea " * 250_000 + "\ud800"),
    "100k_turns": lambda c: c.end_session(OWNER, "s1", [{"role": "user"}] * 100_000),
    "2000_bad_turns": lambda c: c.end_session(OWNER, "s1", [{"role": "robot", "text": 1}] * 2000),
    "1mb_turn": lambda c: c.end_session(OWNER, "s1", [{**TURNS[0], "text": "x" * 1_000_000}]),
    # One more than the parts of a corpus can carry (200 parts of 500).
    "100k_documents": lambda c: c.reindex_knowledge(OWNER, [DOC] * 100_001, consent=True),
    "500_bad_documents": lambda c: c.reindex_knowledge(OWNER, [{"doc_id": "?"}] * 500, consent=True),
    "1mb_session_id": lambda c: c.remember(OWNER, "tea", session_id="s" * 1_000_000),
    "1mb_owner_with_surrogate": lambda c: c.remember("o" * 1_000_000 + "\ud800", "tea"),
}


@pytest.mark.parametrize("case", list(HUGE), ids=list(HUGE))
def test_huge_bad_input_fails_fast_with_a_short_message(case: str, client: MemjobsClient) -> None:
    # CPU time of this thread, not wall time: refusing is pure computation here, and a
    # machine busy with other work makes it late, not slow (issue 30, item 0).
    started = time.thread_time()
    with pytest.raises(InvalidPayload) as refused:
        HUGE[case](client)
    assert time.thread_time() - started < 2.0
    assert len(str(refused.value)) < MAX_MESSAGE_CHARS


def test_many_problems_are_capped_with_a_count(client: MemjobsClient) -> None:
    with pytest.raises(InvalidPayload) as refused:
        client.end_session(OWNER, "s1", [{"role": "robot", "text": 1}] * 50)
    message = str(refused.value)
    assert "more problem(s)" in message
    assert message.count("transcript.") == 5


PARSED: dict[str, tuple[type[contracts._Payload], dict[str, Any]]] = {
    "remember_text_surrogate": (
        contracts.RememberSource,
        {"owner_key": KEY, "source_id": source_id_for(KEY, "x"), "text": "\ud800"},
    ),
    "forget_bad_id": (contracts.ForgetSource, {"owner_key": KEY, "source_id": "src_1"}),
    "record_task_extra": (
        contracts.RecordTask,
        {"owner_key": KEY, "task_id": "t", "goal": "g", "status": "running", "x": 1},
    ),
}


@pytest.mark.parametrize("case", list(PARSED), ids=list(PARSED))
def test_the_worker_refuses_with_the_producers_words(case: str, client: MemjobsClient) -> None:
    model, payload = PARSED[case]
    actor = next(name for name, m in contracts.PAYLOADS.items() if m is model)
    with pytest.raises(MemjobsError) as at_producer:
        client.send(actor, payload)
    with pytest.raises(MemjobsError) as at_worker:
        parse(model, (payload,), {})
    assert (type(at_worker.value), str(at_worker.value)) == (type(at_producer.value), str(at_producer.value))


def test_the_worker_refuses_a_crafted_huge_list_fast_and_briefly() -> None:
    payload = {"owner_key": KEY, "session_id": "s1", "transcript": [{}] * 1_000_000}
    started = time.thread_time()  # CPU time of this thread: load elsewhere does not count
    with pytest.raises(InvalidPayload) as refused:
        parse(contracts.ConsolidateSession, (payload,), {})
    assert time.thread_time() - started < 2.0
    assert "1000000 items, over the limit of 2000" in str(refused.value)


def test_the_worker_holds_a_crafted_source_to_the_byte_cap_its_settings_give() -> None:
    text = "你好世界"  # 12 bytes
    payload = {"owner_key": KEY, "source_id": source_id_for(KEY, text), "text": text}
    assert parse(contracts.RememberSource, (payload,), {}).text == text  # the default cap: 32 KiB
    with pytest.raises(InvalidPayload) as refused:
        parse(contracts.RememberSource, (payload,), {}, contracts.SourceRules(max_text_bytes=10))
    assert "text: 12 bytes, over the limit of 10 bytes" in str(refused.value)
