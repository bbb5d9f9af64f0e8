"""The memory service and its providers: one writer of USER.md and MEMORY.md,
bounded and secret-free patches, no lost update between concurrent writers
(files across processes, SQL across connections), normalised provider output,
the provider loader and an audit that never holds memory text."""

from __future__ import annotations

import builtins
import multiprocessing
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import memjobs_worker.sessions.memory_docs as memory_docs
from memjobs_client.contracts import owner_key
from memjobs_client.errors import ConfigurationError, InvalidPayload, SensitiveContent, TransientError
from memjobs_worker.db import create_db_engine
from memjobs_worker.sessions.memory_docs import (
    PROTOCOL_VERSION,
    ApplyResult,
    AuditEntry,
    Change,
    ChangeContext,
    Document,
    Edit,
    Health,
    ListOptions,
    MarkdownFileProvider,
    MemoryProvider,
    MemoryService,
    ProviderInfo,
    SqlMemoryProvider,
    VersionConflict,
    load_provider,
    normalise_documents,
)
from memjobs_worker.sessions.memory_docs.patches import Plan, plan_replace
from memjobs_worker.sessions.memory_docs.protocol import SCOPES

OWNER = "alice"  # the owner id: providers get it (a host's adapter maps tenants by it)
OWNER_KEY = owner_key(OWNER)  # what the built-in providers store under
OTHER = "bob"
MEM = "MEMORY.md"
SECRET = "my password is hunter2!"
LINES_PER_WRITER = 25


class InMemoryProvider(MemoryProvider):
    """A host's own provider, as a host would write one (also the conflict seam)."""

    def __init__(self, protocol_version: int = PROTOCOL_VERSION) -> None:
        self.protocol_version = protocol_version
        self.docs: dict[tuple[str, str], Document] = {}
        self.before_apply: Callable[[], object] = lambda: None
        self.data_dir: Path | None = None

    def describe(self) -> ProviderInfo:
        return ProviderInfo(self.protocol_version, "test-memory", "Test memory")

    def list(self, owner_id: str, options: ListOptions) -> builtins.list[Document]:
        return [d for (o, _), d in self.docs.items() if o == owner_id][: options.max_docs]

    def apply(self, owner_id: str, changes: Sequence[Change], context: ChangeContext) -> ApplyResult:
        self.before_apply()
        for change in changes:
            current = self.docs.get((owner_id, change.doc))
            if change.expected_version not in (None, current.version if current else 0):
                raise VersionConflict("moved on")
        written = []
        for change in changes:
            current = self.docs.get((owner_id, change.doc))
            doc = Document(change.doc, SCOPES[change.doc], change.content, (current.version if current else 0) + 1)
            self.docs[(owner_id, change.doc)] = doc
            written.append(doc)
        return ApplyResult(len(written), tuple(written))

    def health(self) -> Health:
        return Health(True)

    def close(self) -> None:
        pass


def make_test_provider(data_dir: Path) -> InMemoryProvider:
    provider = InMemoryProvider()
    provider.data_dir = data_dir
    return provider


def make_provider_without_arguments() -> InMemoryProvider:
    return InMemoryProvider()


def make_old_provider() -> InMemoryProvider:
    return InMemoryProvider(protocol_version=PROTOCOL_VERSION + 1)


def make_not_a_provider() -> object:
    return object()


@pytest.fixture
def sql_engine(database_url: str) -> Iterator[Engine]:
    engine = create_db_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture(params=["markdown", "sql"])
def provider(request: pytest.FixtureRequest, tmp_path: Path) -> MemoryProvider:
    if request.param == "markdown":
        return MarkdownFileProvider(tmp_path / "memory")
    return SqlMemoryProvider(request.getfixturevalue("sql_engine"))


class ListAudit:
    """The audit trail's interface, kept in a list (the table: tests/sessions/test_memory_audit.py)."""

    def __init__(self) -> None:
        self.entries: list[AuditEntry] = []

    def record(self, entries: Sequence[AuditEntry]) -> None:
        self.entries.extend(entries)

    def text(self) -> str:
        return "\n".join(repr(e) for e in self.entries)


@pytest.fixture
def audit() -> ListAudit:
    return ListAudit()


@pytest.fixture
def service(provider: MemoryProvider, audit: ListAudit) -> MemoryService:
    return MemoryService(provider, max_doc_chars=200, max_change_chars=80, audit=audit)


def stored_text(provider: MemoryProvider, tmp_path: Path) -> str:
    """Everything the provider keeps, raw: every file, or every row."""
    if isinstance(provider, SqlMemoryProvider):
        with provider.engine.connect() as conn:
            return "\n".join(conn.execute(sa.text("SELECT content FROM memory_documents")).scalars())
    return "\n".join(p.read_text("utf-8", "replace") for p in tmp_path.rglob("*") if p.is_file())


# -- the operations ---------------------------------------------------------------------


def test_a_missing_document_reads_empty_at_version_0(service: MemoryService) -> None:
    assert service.read(OWNER, MEM) == Document(MEM, "memory", "", 0)
    assert [(d.doc, d.scope, d.version) for d in service.snapshot(OWNER)] == [
        ("USER.md", "user", 0),
        (MEM, "memory", 0),
    ]


def test_append_then_read_gives_the_lines_and_a_new_version(service: MemoryService) -> None:
    assert service.append(OWNER, MEM, "- lives in Hangzhou") == memory_docs.OpResult(True, MEM, 1)
    assert service.append(OWNER, MEM, "- likes tea\n").version == 2
    assert service.read(OWNER, MEM) == Document(MEM, "memory", "- lives in Hangzhou\n- likes tea", 2)
    assert service.read(OTHER, MEM).version == 0  # owners are isolated


def test_replace_changes_the_unique_match(service: MemoryService) -> None:
    service.append(OWNER, "USER.md", "- call me Ali\n- reply briefly")
    result = service.replace(OWNER, "USER.md", "Ali", "Alice")
    assert (result.applied, result.version) == (True, 2)
    assert service.read(OWNER, "USER.md").content == "- call me Alice\n- reply briefly"


def test_replace_without_a_match_changes_nothing_and_says_not_found(service: MemoryService) -> None:
    service.append(OWNER, MEM, "- likes tea")
    assert service.replace(OWNER, MEM, "coffee", "juice") == memory_docs.OpResult(False, MEM, 1, "not_found")
    assert service.read(OWNER, MEM) == Document(MEM, "memory", "- likes tea", 1)


def test_replace_with_several_matches_changes_nothing_and_says_ambiguous(service: MemoryService) -> None:
    service.append(OWNER, MEM, "- likes tea\n- buys tea")
    result = service.replace(OWNER, MEM, "tea", "coffee")
    assert (result.applied, result.reason) == (False, "ambiguous")
    assert service.read(OWNER, MEM).content == "- likes tea\n- buys tea"
    with pytest.raises(InvalidPayload) as raised:
        result.raise_for_refusal()
    assert raised.value.reason == "ambiguous"


def test_empty_new_text_deletes_the_match_and_its_line(service: MemoryService) -> None:
    service.append(OWNER, MEM, "- a\n- wrong fact\n- c")
    assert service.replace(OWNER, MEM, "- wrong fact", "").applied
    assert service.read(OWNER, MEM).content == "- a\n- c"


def test_assistant_md_and_other_names_are_never_writable(
    service: MemoryService, provider: MemoryProvider, tmp_path: Path
) -> None:
    for doc in ("ASSISTANT.md", "../MEMORY.md", "memory.txt"):
        assert service.append(OWNER, doc, "- be rude").reason == "forbidden_document"
        assert service.replace(OWNER, doc, "kind", "rude").reason == "forbidden_document"
    with pytest.raises(InvalidPayload):
        service.read(OWNER, "ASSISTANT.md")
    with pytest.raises(InvalidPayload):
        provider.apply(OWNER, [Change("ASSISTANT.md", "- be rude")], ChangeContext("test"))
    assert "be rude" not in stored_text(provider, tmp_path)


def test_an_oversized_change_or_document_is_refused_and_nothing_written(service: MemoryService) -> None:
    assert service.append(OWNER, MEM, "x" * 81).reason == "too_long"  # max_change_chars=80
    for i in range(4):
        assert service.append(OWNER, MEM, f"{i}" * 48).applied
    assert service.append(OWNER, MEM, "- one line too many").reason == "too_long"  # max_doc_chars=200
    assert service.replace(OWNER, MEM, "0" * 48, "y" * 60).reason == "too_long"
    assert service.read(OWNER, MEM).version == 4


def test_secrets_are_refused_and_never_written(
    service: MemoryService, provider: MemoryProvider, tmp_path: Path, audit: ListAudit
) -> None:
    service.append(OWNER, MEM, "- router password: ask me")
    refused = [
        service.append(OWNER, MEM, SECRET),
        service.append(OWNER, "USER.md", "- key sk-abcdefghijklmnopqrstuvwxyz123456"),
        service.replace(OWNER, MEM, "ask me", "Tr0ub4dor&3"),
    ]  # a secret once on its line
    assert [r.reason for r in refused] == ["sensitive_content"] * 3
    with pytest.raises(SensitiveContent):
        refused[0].raise_for_refusal()
    raw = stored_text(provider, tmp_path) + audit.text()
    assert "hunter2" not in raw and "sk-abc" not in raw and "Tr0ub4dor" not in raw
    assert service.read(OWNER, MEM).version == 1


def test_a_secret_split_across_requests_is_refused_when_its_second_half_lands(
    service: MemoryService, provider: MemoryProvider, tmp_path: Path, audit: ListAudit
) -> None:
    # Issue 31, item 3: each half is clean; the document they make is not.
    assert service.append(OWNER, MEM, "- 我的银行卡密码是").applied
    assert service.append(OWNER, MEM, "- 739164").reason == "sensitive_content"
    assert service.replace(OWNER, MEM, "银行卡密码是", "wifi password is\n- Tiger2024!").reason == "sensitive_content"
    assert "739164" not in stored_text(provider, tmp_path) + audit.text()
    assert "Tiger2024" not in stored_text(provider, tmp_path)
    assert service.read(OWNER, MEM).version == 1


def test_a_secret_split_within_one_turn_refuses_the_turn_at_its_last_edit(service: MemoryService) -> None:
    outcome = service.edit(
        OWNER,
        [
            Edit("append", MEM, text="- my wifi password is"),
            Edit("append", "USER.md", text="- call me Lin"),
            Edit("append", MEM, text="- Tiger2024!"),
        ],
        context=ChangeContext("memory_tool"),
    )
    assert (outcome.applied, outcome.failed, outcome.reason) == (False, 2, "sensitive_content")
    assert [d.version for d in service.snapshot(OWNER)] == [0, 0]


def test_a_document_already_holding_a_split_secret_takes_only_the_edit_that_clears_it(
    service: MemoryService, provider: MemoryProvider
) -> None:
    # Written before documents were checked whole (straight through the provider).
    apply = provider.apply(OWNER, [Change(MEM, "- 我的银行卡密码是\n- 739164", 0)], ChangeContext("test"))
    assert apply.changed == 1
    assert service.append(OWNER, MEM, "- likes tea").reason == "sensitive_content"
    assert service.replace(OWNER, MEM, "- 739164", "").applied
    assert service.append(OWNER, MEM, "- likes tea").applied


def test_a_repeated_patch_is_a_duplicate_noop(service: MemoryService) -> None:
    service.append(OWNER, MEM, "- likes tea\n- likes tea and coffee")
    assert service.append(OWNER, MEM, "- likes tea") == memory_docs.OpResult(False, MEM, 1, "duplicate")
    assert service.replace(OWNER, MEM, "- likes tea\n", "").applied
    assert service.append(OWNER, MEM, "- likes tea").applied  # only a whole-line match counts
    assert service.replace(OWNER, MEM, "coffee", "milk").applied
    assert service.replace(OWNER, MEM, "coffee", "milk").reason == "duplicate"  # already applied
    assert service.read(OWNER, MEM) == Document(MEM, "memory", "- likes tea and milk\n- likes tea", 4)


def test_empty_text_is_refused(service: MemoryService) -> None:
    assert service.append(OWNER, MEM, " \n").reason == "empty"
    assert service.replace(OWNER, MEM, "", "x").reason == "empty"
    with pytest.raises(InvalidPayload):
        service.append(OWNER, MEM, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidPayload):
        service.read("", MEM)


def test_the_audit_records_each_patch_but_never_its_text(service: MemoryService, audit: ListAudit) -> None:
    service.append(OWNER, MEM, "- 住在杭州", context=ChangeContext("consolidation", session="s-1"))
    service.replace(OWNER, MEM, "杭州", "上海")
    service.replace(OWNER, MEM, "北京", "广州")
    service.append(OWNER, "ASSISTANT.md", "- secret persona")
    text = audit.text()
    assert not any(word in text for word in ("杭州", "上海", "北京", "广州", "persona", "alice"))
    assert [(r.op, r.doc, r.applied, r.reason, r.version) for r in audit.entries] == [
        ("append", MEM, True, None, 1),
        ("replace", MEM, True, None, 2),
        ("replace", MEM, False, "not_found", 2),
        ("append", "ASSISTANT.md", False, "forbidden_document", None),
    ]
    first = audit.entries[0]
    assert (first.session, first.source, first.owner_key) == ("s-1", "consolidation", OWNER_KEY)


def test_providers_report_health(provider: MemoryProvider) -> None:
    health = provider.health()
    assert isinstance(health, Health) and health.ok  # the built-in providers answer a Health
    assert ProviderInfo.coerce(provider.describe()).protocol_version == PROTOCOL_VERSION  # type: ignore[union-attr]
    provider.close()


@pytest.mark.parametrize(
    ("content", "old", "new", "expected"),
    [
        ("aaa", "aa", "b", Plan(reason="ambiguous")),  # overlapping matches count
        ("- a\n- b", "- b", "", Plan("- a")),  # the last line goes with its newline
        ("- a\n- b\n", "- a", "", Plan("- b\n")),
        ("- tea and milk", "tea and ", "", Plan("- milk")),  # inside a line: only the match
        ("- x", "- x", "- x", Plan(reason="duplicate")),
    ],
)
def test_plan_replace_edits_text_exactly(content: str, old: str, new: str, expected: Plan) -> None:
    assert plan_replace(content, old, new, max_doc_chars=100) == expected


# -- concurrency --------------------------------------------------------------------------


def _append_lines(root: str, writer: int, start: Any) -> None:
    """One writer process: its own provider and service on the shared directory."""
    service = MemoryService(MarkdownFileProvider(Path(root)))
    if not start.wait(120):
        raise SystemExit(2)
    for i in range(LINES_PER_WRITER):
        if not service.append(OWNER, MEM, f"- writer {writer} line {i:02d}").applied:
            raise SystemExit(3)


def _assert_all_lines(service: MemoryService) -> None:
    doc = service.read(OWNER, MEM)
    expected = {f"- writer {w} line {i:02d}" for w in range(2) for i in range(LINES_PER_WRITER)}
    assert set(doc.content.splitlines()) == expected
    assert doc.version == 2 * LINES_PER_WRITER


def test_two_writer_processes_on_markdown_files_lose_nothing(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_append_lines, args=(str(tmp_path), w, start)) for w in range(2)]
    for proc in procs:
        proc.start()
    start.set()
    for proc in procs:
        proc.join(timeout=240)
    assert [p.exitcode for p in procs] == [0, 0]
    _assert_all_lines(MemoryService(MarkdownFileProvider(tmp_path)))


def test_two_writers_on_separate_sql_connections_lose_nothing(database_url: str) -> None:
    engines = [create_db_engine(database_url) for _ in range(2)]
    start = threading.Barrier(2, timeout=120)
    failures: list[BaseException] = []

    def write(writer: int) -> None:
        try:
            service = MemoryService(SqlMemoryProvider(engines[writer]))
            start.wait()
            for i in range(LINES_PER_WRITER):
                assert service.append(OWNER, MEM, f"- writer {writer} line {i:02d}").applied
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert failures == [] and not any(t.is_alive() for t in threads)
    _assert_all_lines(MemoryService(SqlMemoryProvider(engines[0])))
    for engine in engines:
        engine.dispose()


def test_a_write_that_lands_between_read_and_apply_is_kept_and_retried_over() -> None:
    provider = InMemoryProvider()
    service = MemoryService(provider)
    service.append(OWNER, MEM, "- first")
    interloper = MemoryService(provider)
    hooks = [lambda: interloper.append(OWNER, MEM, "- from elsewhere")]
    provider.before_apply = lambda: hooks.pop()() if hooks else None
    assert service.append(OWNER, MEM, "- mine").version == 3
    assert service.read(OWNER, MEM).content == "- first\n- from elsewhere\n- mine"


def test_endless_conflicts_give_up_with_a_transient_error_and_write_nothing(audit: ListAudit) -> None:
    provider = InMemoryProvider()

    def bump() -> None:
        doc = provider.docs.get((OWNER, MEM)) or Document(MEM, "memory", "", 0)
        provider.docs[(OWNER, MEM)] = Document(MEM, "memory", doc.content, doc.version + 1)

    provider.before_apply = bump
    with pytest.raises(VersionConflict):
        MemoryService(provider, max_attempts=3, audit=audit).append(OWNER, MEM, "- mine")
    assert provider.docs[(OWNER, MEM)] == Document(MEM, "memory", "", 3)
    assert [e.reason for e in audit.entries] == ["version_conflict"]


def test_a_hand_edited_file_counts_as_a_new_version(tmp_path: Path) -> None:
    provider = MarkdownFileProvider(tmp_path)
    service = MemoryService(provider)
    service.append(OWNER, MEM, "- likes tea")
    path = tmp_path / OWNER_KEY / MEM
    path.write_text("- likes green tea\n", "utf-8")  # the user opened the file
    assert service.read(OWNER, MEM).version == 2
    with pytest.raises(VersionConflict):
        provider.apply(OWNER, [Change(MEM, "stale", expected_version=1)], ChangeContext("test"))
    assert service.append(OWNER, MEM, "- walks daily").version == 3
    assert path.read_text("utf-8") == "- likes green tea\n- walks daily"
    assert sorted(p.name for p in path.parent.iterdir()) == [".lock", ".versions.json", MEM]


# -- normalisation and loading ------------------------------------------------------------


def test_normalise_documents_drops_invalid_and_duplicate_documents_and_caps_length() -> None:
    docs: list[object] = [
        Document(MEM, "memory", "old", 1),
        {"doc": " memory.md ", "content": "newer and longer", "version": 2},
        Document(MEM, "memory", "older", 0),
        {"scope": "user", "content": "from a scope", "version": 3},
        {"doc": "ASSISTANT.md", "content": "persona", "version": 9},
        {"doc": "USER.md", "scope": "memory", "content": "contradiction", "version": 9},
        {"doc": "USER.md", "content": b"bytes", "version": 9},
        {"doc": "USER.md", "content": "bool version", "version": True},
        {"doc": "USER.md", "content": "negative", "version": -1},
        "USER.md",
        42,
        None,
    ]
    assert normalise_documents(docs, 5) == [
        Document("USER.md", "user", "from ", 3),
        Document(MEM, "memory", "newer", 2),
    ]
    assert normalise_documents(None, 5) == normalise_documents("USER.md", 5) == []


def test_load_provider_builds_the_built_in_providers(tmp_path: Path, sql_engine: Engine) -> None:
    default = load_provider(None, data_dir=tmp_path)
    assert isinstance(default, MarkdownFileProvider) and default.root == tmp_path / "memory"
    assert isinstance(load_provider(" Markdown ", data_dir=tmp_path), MarkdownFileProvider)
    sql = load_provider("sql", data_dir=tmp_path, engine_factory=lambda: sql_engine)
    assert isinstance(sql, SqlMemoryProvider) and sql.engine is sql_engine


def test_load_provider_imports_a_hosts_provider(tmp_path: Path) -> None:
    provider = load_provider(f"{__name__}:make_test_provider", data_dir=tmp_path)
    assert isinstance(provider, InMemoryProvider) and provider.data_dir == tmp_path
    assert isinstance(load_provider(f"{__name__}:make_provider_without_arguments", data_dir=tmp_path), InMemoryProvider)
    service = MemoryService(provider)
    assert service.append(OWNER, MEM, "- hosted").applied
    assert service.read(OWNER, MEM).content == "- hosted"


@pytest.mark.parametrize(
    "spec",
    [
        f"{__name__}:make_old_provider",
        f"{__name__}:make_not_a_provider",
        f"{__name__}:no_such_factory",
        "no_such_module:factory",
        "mem0",
        "sql",
    ],
)
def test_load_provider_refuses_what_cannot_work(spec: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        load_provider(spec, data_dir=tmp_path)  # "sql" without an engine factory


def test_a_providers_junk_cannot_break_the_service() -> None:
    provider = InMemoryProvider()
    provider.docs[(OWNER, "ASSISTANT.md")] = Document("ASSISTANT.md", "user", "persona", 5)
    provider.docs[(OWNER, MEM)] = Document(MEM, "memory", "x" * 50, 2)
    service = MemoryService(provider, max_doc_chars=10)
    assert [d.doc for d in service.snapshot(OWNER)] == ["USER.md", MEM]
    assert service.read(OWNER, MEM).content == "x" * 10
    assert service.append(OWNER, MEM, "- more").reason == "too_long"  # never writes a cut snapshot


def test_the_package_exports_its_public_api() -> None:
    assert len(memory_docs.__all__) == len(set(memory_docs.__all__))
    assert all(hasattr(memory_docs, name) for name in memory_docs.__all__)
    assert VersionConflict.__bases__ == (TransientError,)
    assert VersionConflict.reason == "version_conflict"


def test_a_lost_audit_row_never_undoes_the_patch(provider: MemoryProvider) -> None:
    class DownAudit:
        def record(self, entries: Sequence[AuditEntry]) -> None:
            raise OSError("the audit's database is away")

    service = MemoryService(provider, audit=DownAudit())
    assert service.append(OWNER, MEM, "- kept").applied
    assert service.read(OWNER, MEM).content == "- kept"


def test_a_context_takes_the_producers_ids_as_they_are_but_no_control_character() -> None:
    assert ChangeContext("consolidation", session="s/1 é", turn="turn 3").session == "s/1 é"
    for bad in ({"turn": "a\nb"}, {"trace": ""}, {"session": "x" * 129}):
        with pytest.raises(InvalidPayload):
            ChangeContext("memory_tool", **bad)
    with pytest.raises(InvalidPayload):
        ChangeContext("Not A Source")
