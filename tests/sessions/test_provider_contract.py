"""The MemoryProvider contract (the seeds' shape), run against every provider
memjobs ships and against an example third-party adapter that keeps the
documents behind a small HTTP service (tests/support/memory_adapter.py).

describe -> {protocolVersion, key, label}; list(owner_id, options) synchronous
and bounded; apply(owner_id, changes, context) all or none, version-checked,
answering {changed, documents}; health; close. Then the memory service on each
provider, and the example adapter injected into consolidation, unchanged."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from sqlalchemy.engine import Engine

import memjobs_worker.sessions.memory_docs as memory_docs
from memjobs_client.contracts import owner_key
from memjobs_client.errors import BackendUnavailable, ConfigurationError
from memjobs_worker.db import create_db_engine
from memjobs_worker.sessions.memory_docs import (
    Change,
    ChangeContext,
    Edit,
    ListOptions,
    MarkdownFileProvider,
    MemoryProvider,
    MemoryService,
    SqlMemoryProvider,
    check_provider,
    load_provider,
    normalise_documents,
)
from memjobs_worker.settings import Settings
from tests.support.harness import Harness
from tests.support.memory_adapter import RecordsMemoryAdapter
from tests.support.openai_server import FakeOpenAI, is_consolidation
from tests.support.records_service import RecordsService

OWNER = "acme/alice"
OTHER = "acme/bob"
MEM, USER = "MEMORY.md", "USER.md"
WIDE = ListOptions(max_docs=2, max_chars=10_000)
CTX = ChangeContext("memory_tool", session="s-1", turn="t-3", trace="tr-9")


def settle(value: Any) -> Any:
    """A provider's answer, awaited when the provider is async (as the service does)."""
    if inspect.isawaitable(value):

        async def wait() -> Any:
            return await value

        return asyncio.run(wait())
    return value


def adapter(url: str, **options: Any) -> MemoryProvider:
    """The example adapter for ``MemoryService``, which takes any object with the
    provider's methods (the adapter subclasses nothing) but is annotated with the ABC."""
    return cast(MemoryProvider, RecordsMemoryAdapter(url, **options))


def field(answer: Any, name: str) -> Any:
    return answer[name] if isinstance(answer, dict) else getattr(answer, name)


def docs(provider: Any, owner: str = OWNER, options: ListOptions = WIDE) -> dict[str, tuple[str, int]]:
    return {d.doc: (d.content, d.version) for d in normalise_documents(provider.list(owner, options), 10_000)}


def conflicted(provider: Any, changes: list[Change]) -> bool:
    """True when apply refused the changes as a conflict (raised, or answered changed 0)."""
    try:
        answer = settle(provider.apply(OWNER, changes, CTX))
    except memory_docs.VersionConflict:
        return True
    return bool(field(answer, "changed") == 0)


@pytest.fixture(scope="module")
def records() -> Iterator[RecordsService]:
    with RecordsService() as service:
        yield service


@pytest.fixture
def sql_engine(database_url: str) -> Iterator[Engine]:
    engine = create_db_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture(params=["markdown", "sql", "http-adapter"])
def provider(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "markdown":
        made: Any = MarkdownFileProvider(tmp_path / "memory")
    elif request.param == "sql":
        made = SqlMemoryProvider(request.getfixturevalue("sql_engine"))
    else:
        records: RecordsService = request.getfixturevalue("records")
        records.records.clear()
        made = RecordsMemoryAdapter(records.url)
    yield made
    settle(made.close())


# -- the five methods ---------------------------------------------------------------------


def test_describe_answers_the_protocol_version_a_key_and_a_label(provider: Any) -> None:
    info = memory_docs.ProviderInfo.coerce(provider.describe())
    assert info is not None and info.protocol_version == memory_docs.PROTOCOL_VERSION
    assert info.key and info.label
    assert set(info.as_json()) == {"protocolVersion", "key", "label"}
    assert check_provider(provider) is provider


def test_list_is_synchronous_and_empty_for_an_owner_never_written(provider: Any) -> None:
    answer = provider.list(OWNER, WIDE)
    assert not inspect.isawaitable(answer)
    assert all(d.version == 0 for d in normalise_documents(answer, 100))


def test_apply_writes_every_change_and_answers_changed_and_documents(provider: Any) -> None:
    answer = settle(provider.apply(OWNER, [Change(USER, "- call me Ali", 0), Change(MEM, "- likes tea", 0)], CTX))
    assert field(answer, "changed") == 2
    written = {d.doc: (d.content, d.version) for d in normalise_documents(field(answer, "documents"), 100)}
    assert written == {USER: ("- call me Ali", 1), MEM: ("- likes tea", 1)}
    assert docs(provider) == written
    settle(provider.apply(OWNER, [Change(MEM, "- likes green tea", 1)], CTX))
    assert docs(provider)[MEM] == ("- likes green tea", 2)


def test_a_stale_version_writes_nothing_of_the_call(provider: Any) -> None:
    settle(provider.apply(OWNER, [Change(MEM, "- v1", 0)], CTX))
    assert conflicted(provider, [Change(USER, "- new user doc", 0), Change(MEM, "- stale", 0)])
    assert docs(provider) == {MEM: ("- v1", 1)}  # USER.md, first in the call, not written either


def test_list_is_bounded_by_its_options(provider: Any) -> None:
    settle(provider.apply(OWNER, [Change(USER, "u" * 50, 0), Change(MEM, "m" * 50, 0)], CTX))
    answer = list(provider.list(OWNER, ListOptions(max_docs=1, max_chars=7)))
    assert len(answer) <= 1
    assert all(len(d.content) <= 7 for d in normalise_documents(answer, 10_000))


def test_owners_are_isolated(provider: Any) -> None:
    settle(provider.apply(OWNER, [Change(MEM, "- alice's", 0)], CTX))
    assert docs(provider, OTHER) == {}


def test_health_and_close(provider: Any) -> None:
    assert memory_docs.Health.coerce(provider.health()).ok
    settle(provider.close())
    settle(provider.close())  # idempotent


# -- the memory service on each provider ---------------------------------------------------


def test_the_memory_service_works_the_same_on_every_provider(provider: Any) -> None:
    service = MemoryService(provider, max_doc_chars=500, max_change_chars=100)
    assert service.append(OWNER, MEM, "- lives in Hangzhou", context=CTX).applied
    outcome = service.edit(
        OWNER,
        [Edit("replace", MEM, old_text="Hangzhou", new_text="Shanghai"), Edit("append", USER, text="- reply briefly")],
        context=CTX,
    )
    assert (outcome.applied, outcome.changed) == (True, 2)
    assert {d.doc: d.version for d in outcome.documents} == {MEM: 2, USER: 1}
    refused = service.edit(
        OWNER,
        [Edit("append", MEM, text="- walks daily"), Edit("replace", MEM, old_text="Beijing", new_text="x")],
        context=CTX,
    )
    assert (refused.applied, refused.failed, refused.reason) == (False, 1, "not_found")
    assert [(d.doc, d.content, d.version) for d in service.snapshot(OWNER)] == [
        (USER, "- reply briefly", 1),
        (MEM, "- lives in Shanghai", 2),
    ]


def test_a_conflict_between_read_and_apply_is_retried_on_every_provider(provider: Any) -> None:
    service = MemoryService(provider)
    service.append(OWNER, MEM, "- first")
    interloper = MemoryService(provider)
    original = provider.apply
    hooks = [lambda: interloper.append(OWNER, MEM, "- from elsewhere")]

    def apply_after_someone_else(*args: Any) -> Any:
        if hooks:
            hooks.pop()()
        return original(*args)

    provider.apply = apply_after_someone_else  # between this service's read and its apply
    if hasattr(provider, "serialise"):  # the built-ins would make the interloper wait
        provider.serialise = lambda owner: contextlib.nullcontext()
    assert service.append(OWNER, MEM, "- mine").version == 3
    assert service.read(OWNER, MEM).content == "- first\n- from elsewhere\n- mine"


# -- what only the example adapter shows -------------------------------------------------------


def test_the_adapter_gets_the_owner_id_and_the_context_never_a_hash(records: RecordsService) -> None:
    records.records.clear()
    records.writes.clear()
    service = MemoryService(adapter(records.url))
    assert service.append("acme/alice", MEM, "- likes tea", context=CTX).applied
    assert records.body("acme", "alice", "notes") == "- likes tea"  # its own tenant mapping
    assert records.writes[-1]["meta"] == {"source": "memory_tool", "session": "s-1", "turn": "t-3", "trace": "tr-9"}
    assert owner_key("acme/alice") not in json.dumps(records.writes)


def test_the_adapters_cache_answers_list_while_its_service_is_away(records: RecordsService) -> None:
    records.records.clear()
    service = MemoryService(adapter(records.url, timeout_s=0.5))
    service.append(OWNER, MEM, "- cached")
    records.down = True
    try:
        assert service.read(OWNER, MEM).content == "- cached"
        with pytest.raises(BackendUnavailable):  # a write is never applied to a cache
            service.append(OWNER, MEM, "- not now")
    finally:
        records.down = False


def test_the_adapter_is_injected_by_the_provider_setting(
    records: RecordsService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECORDS_SERVICE_URL", records.url)
    provider = load_provider("tests.support.memory_adapter:from_env", data_dir=tmp_path)
    assert isinstance(provider, RecordsMemoryAdapter)
    with pytest.raises(ConfigurationError, match="lacks"):
        check_provider(object())


def test_the_example_adapter_works_unchanged_in_consolidation(
    records: RecordsService,
    model_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records.records.clear()
    records.writes.clear()
    monkeypatch.setenv("RECORDS_SERVICE_URL", records.url)
    patch = {"patches": [{"doc": MEM, "op": "append", "text": "- Lives in Hangzhou", "evidence": "I live in Hangzhou"}]}
    fake_model.set_chat_handler(lambda r: json.dumps(patch if is_consolidation(r) else {"memory": []}))
    h = harness_factory(
        model_settings(memory_docs_provider="tests.support.memory_adapter:from_env", memory_provider="off")
    )
    h.start_worker()
    h.client.end_session(
        "acme/alice", "s/42 é", [{"role": "user", "text": "I live in Hangzhou", "ts": "2026-12-01T10:00:00Z"}]
    )
    h.drain()
    assert records.body("acme", "alice", "notes") == "- Lives in Hangzhou"
    assert records.writes[-1]["meta"]["source"] == "consolidation"
    assert records.writes[-1]["meta"]["session"] == "s/42 é"
    [entry] = [e for e in h.runtime.audit.entries() if e.applied]
    assert (entry.owner_key, entry.source, entry.session) == (owner_key("acme/alice"), "consolidation", "s/42 é")


def test_a_message_with_only_the_owner_key_is_refused_by_a_hosts_adapter(
    records: RecordsService, tmp_path: Path
) -> None:
    from memjobs_client.errors import InvalidPayload

    legacy = memory_docs.OwnerKey(owner_key(OWNER))  # a consolidation message of an older producer
    with pytest.raises(InvalidPayload) as refused:
        MemoryService(adapter(records.url)).read(legacy, MEM)
    assert refused.value.reason == "owner_id_missing"
    built_in = MemoryService(MarkdownFileProvider(tmp_path))  # stores by key: the key will do
    built_in.append(OWNER, MEM, "- by id")
    assert built_in.read(legacy, MEM).content == "- by id"


def test_an_async_list_is_refused_saying_why(records: RecordsService) -> None:
    class AsyncList(RecordsMemoryAdapter):
        async def list(self, owner_id: str, options: Any) -> list[dict[str, Any]]:  # type: ignore[override]
            return []

    with pytest.raises(BackendUnavailable, match="synchronously"):
        MemoryService(cast(MemoryProvider, AsyncList(records.url))).read(OWNER, MEM)  # as adapter() says
