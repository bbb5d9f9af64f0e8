"""Property-based tests (Hypothesis) over every producer entry point and every
actor's payload parser: any input either enqueues (or parses to) a valid
message or raises a memjobs error, never another exception, and never lets
through text the credential check refuses.

Inputs mix arbitrary values (None, numbers, bytes, nested lists and dicts),
text with lone surrogates and NULs, and lines of the credential corpus.  The
runs are bounded (``max_examples``) so the whole file takes seconds.  The
producer runs against the test session's own Redis, emptied between examples.

Transcript turns and task goals inside session payloads are left out of the
"never lets through" check: the session-end work redacts them instead of
refusing them (issue 10, item 3), and that redaction is built apart from this.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memjobs_client import contracts
from memjobs_client.client import MemjobsClient
from memjobs_client.contracts import QUEUES, owner_key, source_id_for
from memjobs_client.errors import MemjobsError
from memjobs_client.sensitive import find_sensitive_text
from memjobs_worker.jobs import parse
from tests.support.redis_values import as_bytes
from tests.support.sensitive_corpus import positives

OWNER = "erin@example.com"
KEY = owner_key(OWNER)
TS = "2026-11-30T10:00:00Z"
SECRETS = [text for _, _, text in positives()]
FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Text: ordinary, with any code point (lone surrogates, NUL, controls), or a credential.
texts = st.one_of(
    st.text(max_size=30),
    st.text(st.characters(exclude_categories=()), max_size=30),
    st.sampled_from(SECRETS),
    st.builds(lambda a, s: f"{a} {s}", st.text(max_size=10), st.sampled_from(SECRETS)),
    st.sampled_from(["tea", "我住在杭州", "s1", "t1", "notes", "/srv/docs/a.md"]),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.binary(max_size=8), texts)
anything = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=8,
)
turns = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant", "robot"]),
            "text": texts,
            "ts": st.sampled_from([TS, "yesterday", 5]),
        }
    ),
    anything,
)
tasks = st.one_of(st.fixed_dictionaries({"task_id": texts, "goal": texts}), anything)
documents = st.one_of(
    st.fixed_dictionaries(
        {"doc_id": st.sampled_from(["d1", "a.b", "sk-" + "x" * 30]) | texts, "title": texts, "text": texts}
    ),
    texts,
    anything,
)
owners = st.one_of(st.just(OWNER), texts, anything)


def lists_of(items: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(items, max_size=4), anything)


def _strings(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, (*path, str(k)))
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v, path)


def _redacted_elsewhere(path: tuple[str, ...]) -> bool:
    """Turn texts and task goals of a session (redacted at session end, see the docstring)."""
    return path[-2:] in (("transcript", "text"), ("tasks", "goal"))


def assert_no_refused_text(payload: Any) -> None:
    for path, text in _strings(payload):
        if not _redacted_elsewhere(path):
            assert find_sensitive_text(text) is None, path


@pytest.fixture
def client(redis_url: str) -> Iterator[tuple[MemjobsClient, redis.Redis]]:
    c = MemjobsClient(redis_url, consolidation_enabled=True, digest_enabled=True)
    r = redis.Redis.from_url(redis_url)
    yield c, r
    c.close()
    r.close()


def enqueued(r: redis.Redis) -> list[dict[str, Any]]:
    """Every payload in the queues, and empty them (the test session's own Redis)."""
    found = []
    for queue in QUEUES:
        for raw in r.hvals(f"memjobs:{queue}.msgs"):
            message = dramatiq.Message.decode(as_bytes(raw))
            assert (message.kwargs, len(message.args)) == ({}, 1)
            found.append(message.args[0])
    r.flushdb()
    return found


def check_call(client: tuple[MemjobsClient, redis.Redis], call: Any) -> None:
    c, r = client
    try:
        call(c)
    except MemjobsError:
        pass
    for payload in enqueued(r):
        assert_no_refused_text(payload)


@FUZZ
@given(
    owner=owners,
    text=st.one_of(texts, anything),
    session_id=st.one_of(st.none(), texts, anything),
    kind=st.one_of(st.sampled_from(["utterance", "explicit"]), anything),
)
def test_remember(client: Any, owner: Any, text: Any, session_id: Any, kind: Any) -> None:
    check_call(client, lambda c: c.remember(owner, text, session_id=session_id, kind=kind))


@FUZZ
@given(owner=owners, source_id=st.one_of(st.just(source_id_for(KEY, "tea")), texts, anything))
def test_forget(client: Any, owner: Any, source_id: Any) -> None:
    check_call(client, lambda c: c.forget(owner, source_id))


@FUZZ
@given(owner=owners, session_id=st.one_of(texts, anything), transcript=lists_of(turns), task_list=lists_of(tasks))
def test_end_session(client: Any, owner: Any, session_id: Any, transcript: Any, task_list: Any) -> None:
    check_call(client, lambda c: c.end_session(owner, session_id, transcript, task_list))


@FUZZ
@given(
    owner=owners,
    task_id=st.one_of(texts, anything),
    goal=st.one_of(texts, anything),
    status=st.one_of(st.sampled_from(["running", "succeeded"]), anything),
)
def test_record_task(client: Any, owner: Any, task_id: Any, goal: Any, status: Any) -> None:
    check_call(client, lambda c: c.record_task(owner, task_id, goal, status))


@FUZZ
@given(owner=owners, docs=lists_of(documents), consent=st.one_of(st.just(True), anything), roots=lists_of(texts))
def test_reindex_knowledge(client: Any, owner: Any, docs: Any, consent: Any, roots: Any) -> None:
    check_call(client, lambda c: c.reindex_knowledge(owner, docs, consent, allowed_roots=roots))


def payloads() -> st.SearchStrategy[dict[Any, Any]]:
    """Payload dicts near every contract: known field names with valid or wild values."""
    valid: dict[str, st.SearchStrategy[Any]] = {
        "schema_version": st.just(1),
        "owner_key": st.just(KEY),
        "source_id": st.just(source_id_for(KEY, "tea")),
        "text": texts,
        "session_id": texts,
        "kind": st.just("utterance"),
        "trigger": st.just("manual"),
        "transcript": lists_of(turns),
        "tasks": lists_of(tasks),
        "task_id": texts,
        "goal": texts,
        "status": st.just("running"),
        "consent": st.just(True),
        "documents": lists_of(documents),
        "allowed_roots": lists_of(texts),
    }
    fields = st.dictionaries(st.sampled_from(sorted(valid)), st.just(None), max_size=len(valid))
    return fields.flatmap(
        lambda keys: st.fixed_dictionaries(
            {k: st.one_of(valid[k], anything) for k in keys}, optional={"extra": anything}
        )
    )


@FUZZ
@given(actor=st.one_of(st.sampled_from(sorted(contracts.PAYLOADS)), texts), payload=st.one_of(payloads(), anything))
def test_send(client: Any, actor: Any, payload: Any) -> None:
    check_call(client, lambda c: c.send(actor, payload))


def _name(model: type[contracts._Payload]) -> str:
    return model.__name__


MODELS = sorted(set(contracts.PAYLOADS.values()), key=_name)


@pytest.mark.parametrize("model", MODELS, ids=_name)
@FUZZ
@given(
    args=st.one_of(st.tuples(payloads()), st.tuples(anything), st.lists(anything, max_size=2).map(tuple)),
    kwargs=st.one_of(st.just({}), st.dictionaries(st.text(max_size=5), anything, max_size=2)),
)
def test_parse(model: type[contracts._Payload], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    try:
        payload = parse(model, args, kwargs)
    except MemjobsError:
        return
    assert isinstance(payload, model)
    assert_no_refused_text(payload.model_dump(mode="json"))
