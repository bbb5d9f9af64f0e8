"""An owner's export, imported into another stack (a fresh database), recalls the
same; imported twice, nothing changes; imported as another owner, that owner
recalls the same."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from memjobs_client.contracts import owner_key, source_id_for
from memjobs_client.errors import InvalidPayload, SensitiveContent
from memjobs_worker.cli import exits
from memjobs_worker.lifecycle import FORMAT, Owner, export_lines, import_owner, owner_parts
from memjobs_worker.settings import Settings
from tests.lifecycle.conftest import Planted, plant
from tests.support.cli import SECRET, cli_env, ok, run_cli
from tests.support.harness import Harness
from tests.support.openai_server import FakeOpenAI, echo_facts_handler

QUERIES = ("hiking in the mountains", "where does the sister live", "green tea")


def _recall(h: Harness, key: str) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    return {q: sorted((hit.text, tuple(hit.source_ids)) for hit in h.pipeline.recall(key, q, 5)) for q in QUERIES}


def _state(h: Harness, owner: str) -> dict[str, object]:
    """Everything an owner has, as the doors read it (ids of memories aside)."""
    key = owner_key(owner)
    return {
        "sources": sorted((s.state, s.text) for s in h.store.list_sources(key)),
        "memories": sorted(m.text for m in h.pipeline.memories(key)),
        "documents": [(d.doc, d.content) for d in h.runtime.memory_docs.snapshot(owner)],
        "sessions": [r.as_dict() for r in h.runtime.sessions.recall_sessions(key, 30)],
        "knowledge": [(d.doc_id, d.title, d.state, d.chunks) for d in h.runtime.knowledge.documents(key)],
        "blackboard": h.runtime.blackboard.restore(key, "s-1"),
    }


@pytest.fixture
def exported(
    model_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness], fake_model: FakeOpenAI
) -> tuple[Harness, Planted, list[str]]:
    """An owner learned with the stand-in model, then exported."""
    fake_model.set_chat_handler(echo_facts_handler)
    h = harness_factory(model_settings())
    alice = plant(h, "alice@example.com", "Qalicetag")
    h.start_worker()
    h.drain()
    assert {s.state for s in h.store.list_sources(alice.key)} == {"learned"}
    return h, alice, list(export_lines(Owner.of(alice.owner), owner_parts(h.runtime)))


def test_the_export_is_a_header_and_one_typed_record_per_line(
    exported: tuple[Harness, Planted, list[str]],
) -> None:
    _, alice, lines = exported
    header, *records = [json.loads(line) for line in lines]
    assert (header["format"], header["version"], header["owner_id"]) == (FORMAT, 1, alice.owner)
    types = [r["type"] for r in records]
    for kind in (
        "source",
        "memory",
        "memory_document",
        "digest",
        "task",
        "blackboard_entry",
        "knowledge_document",
        "audit",
    ):
        assert kind in types, kind
    sources = [r for r in records if r["type"] == "source"]
    assert sorted(s["text"] for s in sources) == sorted(alice.sources)
    assert {s["state"] for s in sources} == {"learned"}
    memories = [r for r in records if r["type"] == "memory"]
    assert {sid for m in memories for sid in m["source_ids"]} == {s["source_id"] for s in sources}
    audit = [r for r in records if r["type"] == "audit"]
    assert audit and not any(alice.tag in json.dumps(a) for a in audit), "the audit has no text"


def test_an_import_into_a_fresh_database_recalls_the_same_and_twice_changes_nothing(
    exported: tuple[Harness, Planted, list[str]],
    model_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
    second_database_url: str,
    tmp_path: Path,
) -> None:
    source, alice, lines = exported
    other = harness_factory(model_settings(database_url=second_database_url, data_dir=tmp_path / "other"))

    first = import_owner(lines, owner_parts(other.runtime))
    assert _recall(other, alice.key) == _recall(source, alice.key)
    assert any(_recall(other, alice.key).values()), "recall found nothing to compare"
    assert _state(other, alice.owner) == _state(source, alice.owner)
    assert {s.source_id for s in other.store.list_sources(alice.key)} == {
        s.source_id for s in source.store.list_sources(alice.key)
    }, "sources keep their ids"

    again = import_owner(lines, owner_parts(other.runtime))
    assert sum(first.changed.values()) > 0
    assert set(again.changed.values()) == {0}
    assert _state(other, alice.owner) == _state(source, alice.owner)


def test_an_import_as_another_owner_gives_that_owner_the_same_recall(
    exported: tuple[Harness, Planted, list[str]],
) -> None:
    h, alice, lines = exported
    carol = "carol@example.com"
    import_owner(lines, owner_parts(h.runtime), owner_id=carol)

    def texts(key: str) -> dict[str, list[str]]:
        return {q: sorted(t for t, _ in hits) for q, hits in _recall(h, key).items()}

    assert texts(owner_key(carol)) == texts(alice.key)
    # Carol's sources have the ids her own remember of the same words would give.
    assert {s.source_id for s in h.store.list_sources(owner_key(carol))} == {
        source_id_for(owner_key(carol), t) for t in alice.sources
    }


def test_a_file_that_is_not_an_export_is_refused_before_anything_is_written(
    exported: tuple[Harness, Planted, list[str]],
) -> None:
    h, alice, lines = exported
    with pytest.raises(InvalidPayload, match="not a memjobs owner export"):
        import_owner(['{"hello": 1}'], owner_parts(h.runtime), owner_id="dave@example.com")
    newer = json.dumps({**json.loads(lines[0]), "version": 99})
    with pytest.raises(InvalidPayload, match="version 99"):
        import_owner([newer, *lines[1:]], owner_parts(h.runtime), owner_id="dave@example.com")
    broken = [*lines[:2], '{"type": "source", "state": "glorious"}', *lines[2:]]
    with pytest.raises(InvalidPayload, match="line 3") as refused:
        import_owner(broken, owner_parts(h.runtime), owner_id="dave@example.com")
    assert "glorious" not in str(refused.value), "the refusal quotes the file"
    secret = json.dumps({"type": "memory", "memory_id": "m-1", "text": SECRET, "source_ids": []})
    with pytest.raises(SensitiveContent, match="line 2") as caught:
        import_owner([lines[0], secret], owner_parts(h.runtime), owner_id="dave@example.com")
    assert "hunter2" not in str(caught.value)
    assert h.store.list_sources(owner_key("dave@example.com")) == []


@pytest.mark.slow
def test_the_commands_export_to_an_owner_only_file_and_import_it(
    exported: tuple[Harness, Planted, list[str]],
    tmp_path: Path,
) -> None:
    h, alice, _ = exported
    env = cli_env(
        h.settings.data_dir,
        MEMJOBS_REDIS_URL=str(h.settings.redis.url),
        MEMJOBS_DATABASE_URL=str(h.settings.database.url),
    )
    path = tmp_path / "alice.jsonl"
    ok(run_cli(env, "export", "--owner", alice.owner, "-o", str(path)))
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text().splitlines()[0])["owner_id"] == alice.owner

    imported = ok(run_cli(env, "import", str(path), "--owner", "erin@example.com", "--json")).json()
    assert imported["changed"]["sources"] == 2 and imported["read"]["source"] == 2
    assert sorted(m.text for m in h.pipeline.memories(owner_key("erin@example.com"))) == sorted(
        m.text for m in h.pipeline.memories(alice.key)
    )

    refused = run_cli(env, "import", str(tmp_path / "missing.jsonl"))
    assert refused.code == exits.REFUSED and "cannot read" in refused.stderr
