"""Bad input: refused at the producer with a clear message, dead-lettered at once
at the worker when crafted straight into Redis, and backends that do not answer
reported as such. Real Redis, PostgreSQL and an in-process Dramatiq worker."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dramatiq
import psycopg
import pytest
from dramatiq.common import xq_name
from prometheus_client import REGISTRY

from memjobs_client import keys
from memjobs_client.client import MemjobsClient
from memjobs_client.contracts import (
    ACTOR_EXTRACT,
    ACTOR_FORGET,
    ACTOR_REMEMBER,
    QUEUE_OF,
    QUEUE_REMEMBER,
    QUEUES,
    RememberSource,
    owner_key,
    source_id_for,
)
from memjobs_client.errors import (
    BackendUnavailable,
    ConfigurationError,
    InvalidPayload,
    MemjobsError,
    MemoryOff,
    SensitiveContent,
)
from memjobs_worker.db import create_db_engine, migrate
from memjobs_worker.settings import Settings, load_settings
from tests.support.harness import Harness, HarnessFactory, MakeSettings
from tests.support.leaks import redis_keys_holding

OWNER = "alice@example.com"
KEY = owner_key(OWNER)
LIMIT = 32 * 1024
VALID_TEXT = "I like green tea in the morning"

#: A test for each producer call that reaches Redis: remember and forget.
EACH_PRODUCER_CALL = pytest.mark.parametrize(
    "call",
    [lambda c: c.remember(OWNER, VALID_TEXT), lambda c: c.forget(OWNER, source_id_for(KEY, "x"))],
    ids=["remember", "forget"],
)


# --- helpers ------------------------------------------------------------------


def remember_payload(text: str = VALID_TEXT) -> dict[str, Any]:
    """A payload shaped like RememberSource, as a producer would send it, but not
    validated (crafted messages carry what the producer would have refused)."""
    return RememberSource.model_construct(owner_key=KEY, source_id=source_id_for(KEY, text), text=text).model_dump(
        mode="json"
    )


def patched(payload: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """``payload`` with some fields replaced or added."""
    return {**payload, **fields}


def craft(
    h: Harness,
    actor_name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    queue_name: str | None = None,
) -> dramatiq.Message[Any]:
    """Put a message straight into Redis, bypassing every producer-side check."""
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name=queue_name or QUEUE_OF[actor_name],
        actor_name=actor_name,
        args=args,
        kwargs=kwargs or {},
        options={},
    )
    return h.broker.enqueue(message)


def dead_messages(h: Harness, queue: str) -> list[dramatiq.Message[Any]]:
    raw = h.runtime.redis.hvals(keys.messages(xq_name(queue)))
    return [dramatiq.Message.decode(data if isinstance(data, bytes) else data.encode()) for data in raw]


def dead_counts(h: Harness) -> dict[str, int]:
    return {queue: stats["dead"] for queue, stats in h.queues().items()}


def nothing_queued(h: Harness) -> bool:
    return all(count == 0 for stats in h.queues().values() for count in stats.values())


def failure_records(caplog: pytest.LogCaptureFixture, message_id: str) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.getMessage() == "job failed" and getattr(r, "message_id", None) == message_id
    ]


def extras(record: logging.LogRecord, *names: str) -> tuple[Any, ...]:
    """The structured fields a log call passed in ``extra``."""
    return tuple(getattr(record, name, None) for name in names)


def refused_count(reason: str) -> float:
    value = REGISTRY.get_sample_value("memjobs_refused_total", {"reason": reason})
    return value or 0.0


def free_port() -> int:
    """A local TCP port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sources(h: Harness) -> dict[str, str]:
    return {r.source_id: r.state for r in h.store.list_sources(KEY)}


# --- producer refusals --------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    call: Callable[[Any], Any]  # Any: the calls pass wrong types on purpose
    field: str


REFUSALS = {
    "remember_owner_missing": Refusal(lambda c: c.remember(None, VALID_TEXT), "owner_id"),
    "remember_owner_empty": Refusal(lambda c: c.remember("", VALID_TEXT), "owner_id"),
    "remember_owner_blank": Refusal(lambda c: c.remember("   ", VALID_TEXT), "owner_id"),
    "remember_owner_list": Refusal(lambda c: c.remember([OWNER], VALID_TEXT), "owner_id"),
    "remember_text_empty": Refusal(lambda c: c.remember(OWNER, ""), "text"),
    "remember_text_blank": Refusal(lambda c: c.remember(OWNER, " \t\n "), "text"),
    "remember_text_int": Refusal(lambda c: c.remember(OWNER, 42), "text"),
    "remember_text_none": Refusal(lambda c: c.remember(OWNER, None), "text"),
    "remember_kind_unknown": Refusal(lambda c: c.remember(OWNER, VALID_TEXT, kind="shout"), "kind"),
    "remember_session_id_int": Refusal(lambda c: c.remember(OWNER, VALID_TEXT, session_id=7), "session_id"),
    "forget_owner_empty": Refusal(lambda c: c.forget("", source_id_for(KEY, VALID_TEXT)), "owner_id"),
    "forget_source_id_malformed": Refusal(lambda c: c.forget(OWNER, "src_123"), "source_id"),
    "forget_source_id_int": Refusal(lambda c: c.forget(OWNER, 123), "source_id"),
}


@pytest.mark.parametrize("case", list(REFUSALS.values()), ids=list(REFUSALS))
def test_producer_refuses_invalid_payload_naming_the_field_and_enqueues_nothing(
    case: Refusal, make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    h = harness_factory(make_settings())
    with pytest.raises(InvalidPayload) as info:
        case.call(h.client)
    assert info.value.reason == "invalid_payload"
    assert case.field in str(info.value)
    assert nothing_queued(h), h.queues()


@pytest.mark.parametrize(
    "text",
    ["x" * (LIMIT + 1), "好" * (LIMIT // 3 + 1)],  # 32769 bytes; 10923 characters = 32769 bytes
    ids=["ascii_one_byte_over", "chinese_one_byte_over"],
)
def test_producer_refuses_text_over_the_byte_limit(
    text: str, make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    h = harness_factory(make_settings())
    assert len(text.encode("utf-8")) == LIMIT + 1
    with pytest.raises(InvalidPayload) as info:
        h.client.remember(OWNER, text)
    message = str(info.value)
    assert "text" in message and str(LIMIT + 1) in message and str(LIMIT) in message
    assert nothing_queued(h), h.queues()


def test_producer_counts_chinese_text_in_utf8_bytes_not_characters(
    make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    h = harness_factory(make_settings())
    text = "我" * (LIMIT // 3 + 1)  # a third of the limit in characters, over it in bytes
    assert len(text) < LIMIT // 2
    with pytest.raises(InvalidPayload, match="bytes"):
        h.client.remember(OWNER, text)
    assert nothing_queued(h), h.queues()


@pytest.mark.parametrize(
    "text",
    ["tea " * (LIMIT // 4), "好" * (LIMIT // 3) + "ab"],
    ids=["ascii_exactly_at_limit", "chinese_exactly_at_limit"],
)
def test_producer_accepts_text_exactly_at_the_byte_limit(
    text: str, make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    h = harness_factory(make_settings())
    assert len(text.encode("utf-8")) == LIMIT
    sid = h.client.remember(OWNER, text)
    assert sid == source_id_for(KEY, text)
    assert h.queues()[QUEUE_REMEMBER]["ready"] == 1


def test_producer_limit_follows_max_text_bytes(make_settings: MakeSettings, harness_factory: HarnessFactory) -> None:
    h = harness_factory(make_settings(max_text_bytes=10))
    with pytest.raises(InvalidPayload, match="over the limit of 10 bytes"):
        h.client.remember(OWNER, "你好世界")  # 4 characters, 12 bytes
    assert nothing_queued(h), h.queues()


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("my password is hunter2!", "hunter2"),
        ("我的银行卡密码是 852741", "852741"),
        ("the api key is sk-abcdefghijklmnopqrstuvwx1234", "sk-abcdefghijklmnopqrstuvwx1234"),
    ],
    ids=["english_password", "chinese_password", "api_key"],
)
def test_producer_refuses_sensitive_text_without_repeating_it(
    text: str, secret: str, make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    h = harness_factory(make_settings())
    with pytest.raises(SensitiveContent) as info:
        h.client.remember(OWNER, text)
    assert info.value.reason == "sensitive_content"
    assert "credential" in str(info.value)
    assert secret not in str(info.value)
    assert nothing_queued(h), h.queues()


# --- crafted messages at the worker -------------------------------------------


@dataclass(frozen=True)
class Crafted:
    actor: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def queue(self) -> str:
        return QUEUE_OF[self.actor]


MALFORMED = {
    # A version no worker reads (a newer one is left for a newer worker: tests/faults/test_rolling_upgrade.py).
    "schema_version_0": Crafted(ACTOR_REMEMBER, (patched(remember_payload(), schema_version=0),)),
    "schema_version_text_forget": Crafted(
        ACTOR_FORGET, ({"schema_version": "2", "owner_key": KEY, "source_id": source_id_for(KEY, VALID_TEXT)},)
    ),
    "schema_version_negative_extract": Crafted(ACTOR_EXTRACT, ({"schema_version": -1, "owner_key": KEY},)),
    "args_not_a_dict": Crafted(ACTOR_REMEMBER, (VALID_TEXT,)),
    "no_args": Crafted(ACTOR_REMEMBER, ()),
    "two_args": Crafted(ACTOR_REMEMBER, (remember_payload(), remember_payload())),
    "payload_as_kwargs": Crafted(ACTOR_REMEMBER, (), remember_payload()),
    "payload_and_kwargs": Crafted(ACTOR_REMEMBER, (remember_payload(),), {"priority": "high"}),
    "extra_unknown_field": Crafted(ACTOR_REMEMBER, (patched(remember_payload(), priority=1),)),
    "owner_key_is_raw_owner_id": Crafted(ACTOR_REMEMBER, (patched(remember_payload(), owner_key=OWNER),)),
    "text_wrong_type": Crafted(ACTOR_REMEMBER, (patched(remember_payload(), text=42),)),
    "text_blank": Crafted(ACTOR_REMEMBER, (patched(remember_payload(), text="   "),)),
    "forget_source_id_malformed": Crafted(ACTOR_FORGET, ({"owner_key": KEY, "source_id": "src_123"},)),
    "extract_trigger_unknown": Crafted(ACTOR_EXTRACT, ({"owner_key": KEY, "trigger": "whenever"},)),
}
UNKNOWN_ACTOR = "remember_source_v2"


@pytest.mark.parametrize("case", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_message_is_dead_lettered_at_once_without_retries(
    case: Crafted, make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    h = harness_factory(make_settings())
    sent = craft(h, case.actor, case.args, case.kwargs)
    h.start_worker()
    h.drain()
    assert dead_counts(h) == {q: int(q == case.queue) for q in QUEUES}
    [dead] = dead_messages(h, case.queue)
    assert dead.message_id == sent.message_id
    assert dead.options.get("retries", 0) == 0
    assert h.store.list_sources(KEY) == []


@pytest.mark.parametrize("case", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_message_failure_is_logged_with_reason_invalid_payload(
    case: Crafted,
    make_settings: MakeSettings,
    harness_factory: HarnessFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    h = harness_factory(make_settings())
    sent = craft(h, case.actor, case.args, case.kwargs)
    h.start_worker()
    h.drain()
    [record] = failure_records(caplog, sent.message_id)
    assert extras(record, "actor", "outcome", "reason", "retries") == (
        case.actor,
        "invalid_payload",
        "invalid_payload",
        0,
    )


def test_message_for_an_unknown_actor_is_dead_lettered_at_once(
    make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    h = harness_factory(make_settings())
    sent = craft(h, UNKNOWN_ACTOR, (remember_payload(),), queue_name=QUEUE_REMEMBER)
    h.start_worker()
    h.drain()
    assert dead_counts(h) == {q: int(q == QUEUE_REMEMBER) for q in QUEUES}
    [dead] = dead_messages(h, QUEUE_REMEMBER)
    assert (dead.message_id, dead.actor_name) == (sent.message_id, UNKNOWN_ACTOR)
    assert dead.options.get("retries", 0) == 0
    assert h.store.list_sources(KEY) == []


def test_message_for_an_unknown_actor_is_logged_with_its_reason(
    make_settings: MakeSettings,
    harness_factory: HarnessFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    h = harness_factory(make_settings())
    craft(h, UNKNOWN_ACTOR, (remember_payload(),), queue_name=QUEUE_REMEMBER)
    h.start_worker()
    h.drain()
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("undefined actor" in m and UNKNOWN_ACTOR in m and "DLQ" in m for m in logged), logged


def test_malformed_messages_do_not_disturb_valid_jobs(
    make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    h = harness_factory(make_settings())
    texts = ["我住在杭州", "I walk the dog at seven", "my favourite colour is green"]
    valid: list[str] = []
    cases = list(MALFORMED.values())
    for i, case in enumerate(cases):
        craft(h, case.actor, case.args, case.kwargs)
        if i % 5 == 0:
            valid.append(h.client.remember(OWNER, texts[len(valid)]))
    craft(h, UNKNOWN_ACTOR, (remember_payload(),), queue_name=QUEUE_REMEMBER)
    assert len(valid) == len(texts)
    h.start_worker()
    h.drain()
    assert sources(h) == {sid: "learned" for sid in valid}
    assert sorted(m.text for m in h.pipeline.memories(KEY)) == sorted(texts)
    expected_dead = {q: sum(c.queue == q for c in cases) + int(q == QUEUE_REMEMBER) for q in QUEUES}
    assert dead_counts(h) == expected_dead


def test_crafted_text_over_the_byte_limit_is_refused_at_the_worker(
    make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    """The 32 KiB limit is part of validation: a message that skipped the
    producer must not get an oversized text into the ledger (and to the model)."""
    h = harness_factory(make_settings())
    text = "tea " * (LIMIT // 4) + "x"
    sent = craft(h, ACTOR_REMEMBER, (remember_payload(text=text),))
    h.start_worker()
    h.drain()
    assert h.store.list_sources(KEY) == []
    [dead] = dead_messages(h, QUEUE_REMEMBER)
    assert dead.message_id == sent.message_id
    assert dead.options.get("retries", 0) == 0


# --- a secret crafted past the producer -----------------------------------------

SECRETS = pytest.mark.parametrize(
    ("text", "secret"),
    [("my password is hunter2!", b"hunter2"), ("我的银行卡密码是 852741", b"852741")],
    ids=["english", "chinese"],
)


@SECRETS
def test_crafted_secret_is_refused_at_the_worker_and_counted(
    text: str, secret: bytes, make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    h = harness_factory(make_settings())
    before = refused_count("sensitive_content")
    craft(h, ACTOR_REMEMBER, (remember_payload(text=text),))
    h.start_worker()
    h.drain()
    assert refused_count("sensitive_content") == before + 1


@SECRETS
def test_crafted_secret_is_not_stored_in_the_ledger(
    text: str, secret: bytes, make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    h = harness_factory(make_settings())
    craft(h, ACTOR_REMEMBER, (remember_payload(text=text),))
    h.start_worker()
    h.drain()
    assert h.store.list_sources(KEY) == []
    assert sum(h.store.counts_by_state().values()) == 0


@SECRETS
def test_crafted_secret_is_not_kept_in_the_dead_letter_queue_or_anywhere_in_redis(
    text: str, secret: bytes, make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    h = harness_factory(make_settings())
    craft(h, ACTOR_REMEMBER, (remember_payload(text=text),))
    assert redis_keys_holding(h.runtime.redis, [secret]) != []  # the crafted message carries it
    h.start_worker()
    h.drain()
    assert dead_counts(h) == {q: 0 for q in QUEUES}
    assert redis_keys_holding(h.runtime.redis, [secret]) == []


# --- memory off -----------------------------------------------------------------


@EACH_PRODUCER_CALL
def test_memory_off_producer_refuses_with_memory_off(
    call: Callable[[MemjobsClient], Any],
    make_settings: MakeSettings,
    harness_factory: HarnessFactory,
) -> None:
    h = harness_factory(make_settings(memory_provider="off"))
    with pytest.raises(MemoryOff) as info:
        call(h.client)
    assert info.value.reason == "memory_off"
    assert "NOVA_AUDIO_AGENT_MEMORY_PROVIDER=off" in str(info.value)
    assert nothing_queued(h), h.queues()


def test_memory_off_crafted_message_is_dead_lettered_at_once(
    make_settings: MakeSettings, harness_factory: HarnessFactory
) -> None:
    h = harness_factory(make_settings(memory_provider="off"))
    sent = craft(h, ACTOR_REMEMBER, (remember_payload(),))
    h.start_worker()
    h.drain()
    assert dead_counts(h) == {q: int(q == QUEUE_REMEMBER) for q in QUEUES}
    [dead] = dead_messages(h, QUEUE_REMEMBER)
    assert dead.message_id == sent.message_id
    assert dead.options.get("retries", 0) == 0


def test_memory_off_crafted_message_is_logged_with_reason_memory_off(
    make_settings: MakeSettings,
    harness_factory: HarnessFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    h = harness_factory(make_settings(memory_provider="off"))
    sent = craft(h, ACTOR_REMEMBER, (remember_payload(),))
    h.start_worker()
    h.drain()
    [record] = failure_records(caplog, sent.message_id)
    assert extras(record, "outcome", "reason", "retries") == ("memory_off", "memory_off", 0)


def test_memory_off_allocates_no_mem0_storage(make_settings: MakeSettings, harness_factory: HarnessFactory) -> None:
    settings = make_settings(memory_provider="off")
    h = harness_factory(settings)
    craft(h, ACTOR_REMEMBER, (remember_payload(),))
    h.start_worker()
    h.drain()
    assert settings.database.url
    with psycopg.connect(settings.database.url) as conn:
        row = conn.execute("SELECT to_regclass('mem0_memories_512')").fetchone()
    assert row == (None,)
    assert not (settings.data_dir / "mem0").exists()
    assert h.store.list_sources(KEY) == []


# --- settings -------------------------------------------------------------------


def test_unknown_memory_provider_is_a_configuration_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("MEMJOBS_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("NOVA_AUDIO_AGENT_MEMORY_PROVIDER", "bogus")
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    message = str(info.value)
    assert info.value.reason == "configuration"
    assert "NOVA_AUDIO_AGENT_MEMORY_PROVIDER" in message
    assert "'mem0'" in message and "'off'" in message


@pytest.mark.parametrize(
    "env",
    [
        {"QWEN_AUDIO_MEMORY_API_KEY": "sk-qwen-0123456789abcdef"},
        {"DASHSCOPE_API_KEY": "sk-dash-0123456789abcdef"},
        {
            "QWEN_AUDIO_MEMORY_API_KEY": "sk-qwen-0123456789abcdef",
            "DASHSCOPE_API_KEY": "sk-dash-0123456789abcdef",
            "MEMJOBS_EMBEDDING_API_KEY": "sk-embed-0123456789abcdef",
        },
    ],
    ids=["qwen_key", "dashscope_key", "every_key"],
)
def test_redacted_settings_never_show_a_key_or_a_url_password(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("MEMJOBS_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MEMJOBS_DATABASE_URL", "postgresql://memjobs:pg-pass-4411@db.example:5432/mj")
    monkeypatch.setenv("MEMJOBS_REDIS_URL", "redis://:redis-pass-9922@cache.example:6379/0")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.model_keys.chat is not None  # the key was read...
    shown = json.dumps(settings.redacted())
    for secret in [*env.values(), "pg-pass-4411", "redis-pass-9922"]:
        assert secret not in shown  # ...and never shown
    shown_keys = {settings.redacted()[f] for f in ("model.api_key", "model.dashscope_api_key")}
    assert shown_keys <= {"[REDACTED]", None} and "[REDACTED]" in shown_keys
    assert "db.example:5432/mj" in shown and "cache.example:6379/0" in shown


def test_redacted_settings_hide_a_password_given_as_a_url_parameter(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """libpq and redis-py both take ``?password=`` in the URL."""
    monkeypatch.setenv("MEMJOBS_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MEMJOBS_DATABASE_URL", "postgresql://memjobs@db.example:5432/mj?password=pg-pass-4411")
    monkeypatch.setenv("MEMJOBS_REDIS_URL", "redis://cache.example:6379/0?password=redis-pass-9922")
    shown = json.dumps(load_settings().redacted())
    assert "pg-pass-4411" not in shown
    assert "redis-pass-9922" not in shown


# --- backends -------------------------------------------------------------------

SYSTEM_PG_READ_ONLY = "?options=-c%20default_transaction_read_only%3Don"


def _system_postgres_without_pgvector() -> str:
    """The machine's own PostgreSQL (no pgvector), as a read-only URL; skip if absent.

    Only read-only queries ever run against it: the connection is forced
    read-only, and the test is skipped if pgvector turns out to be available
    (then migrate() would go on to write)."""
    reasons = []
    for user in ("postgres", "root"):
        url = f"postgresql://{user}@127.0.0.1:5432/test"
        try:
            with psycopg.connect(url, connect_timeout=3, options="-c default_transaction_read_only=on") as conn:
                has_vector = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        except psycopg.Error as exc:
            reasons.append(f"{user}: {exc}".strip())
            continue
        if has_vector is not None:
            pytest.skip("the system PostgreSQL at 127.0.0.1:5432 has pgvector available")
        return url + SYSTEM_PG_READ_ONLY
    pytest.skip(f"no system PostgreSQL at 127.0.0.1:5432/test: {'; '.join(reasons)}")


def _migration_error(url: str, expected: type[MemjobsError]) -> MemjobsError:
    """The ``expected`` error that migrating the database at ``url`` raises."""
    engine = create_db_engine(url)
    try:
        with pytest.raises(expected) as info:
            migrate(engine)
    finally:
        engine.dispose()
    return info.value


def test_database_without_pgvector_is_a_configuration_error_naming_pgvector() -> None:
    error = _migration_error(_system_postgres_without_pgvector(), ConfigurationError)
    assert "pgvector" in str(error)
    assert error.reason == "configuration"


def test_unreachable_database_is_backend_unavailable() -> None:
    port = free_port()
    error = _migration_error(f"postgresql://memjobs@127.0.0.1:{port}/memjobs", BackendUnavailable)
    message = str(error)
    assert "did not answer" in message and f"127.0.0.1:{port}" in message
    assert error.reason == "backend_unavailable"


def test_unreachable_database_error_does_not_show_its_password() -> None:
    error = _migration_error(f"postgresql://memjobs:pg-pass-4411@127.0.0.1:{free_port()}/memjobs", BackendUnavailable)
    assert "pg-pass-4411" not in str(error)


@EACH_PRODUCER_CALL
def test_producer_with_redis_unreachable_raises_backend_unavailable(
    call: Callable[[MemjobsClient], Any],
) -> None:
    port = free_port()
    client = MemjobsClient(redis_url=f"redis://127.0.0.1:{port}/0")
    try:
        with pytest.raises(BackendUnavailable) as info:
            call(client)
    finally:
        client.close()
    message = str(info.value)
    assert "Redis" in message and f"127.0.0.1:{port}" in message
    assert isinstance(info.value, MemjobsError) and info.value.reason == "backend_unavailable"


def test_undecodable_bytes_pushed_into_a_queue_are_dead_lettered_and_disturb_nothing(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness]
) -> None:
    h = harness_factory(make_settings())
    client = h.runtime.redis
    # Bytes that are not a Dramatiq message at all, pushed the way Dramatiq enqueues.
    client.hset("memjobs:memjobs_remember.msgs", "garbage-1", b"\xff\x00 not json")
    client.rpush("memjobs:memjobs_remember", "garbage-1")
    owner = "frank@example.com"
    sid = h.client.remember(owner, "frank keeps bees")
    h.start_worker()
    h.drain()
    assert h.queues()["memjobs_remember"]["dead"] == 1
    assert [r.state for r in h.store.list_sources(owner_key(owner)) if r.source_id == sid] == ["learned"]
