"""One schema truth: the Alembic migrations build exactly the tables the code
defines on its one metadata, knowledge only when it is on; a database from
before the knowledge migrations joins the knowledge branch without losing data;
a schema from a newer memjobs is refused by name; advisory lock keys are distinct."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from memjobs_client.errors import ConfigurationError
from memjobs_worker import db as db_package
from memjobs_worker.db import advisory, create_db_engine, migrate
from memjobs_worker.db.metadata import CORE, KNOWLEDGE, branch_of
from memjobs_worker.db.migrate import HEADS, migrate_apart
from memjobs_worker.embedded import EmbeddedPostgres
from memjobs_worker.knowledge import TOKENIZER_VERSION, KnowledgeStore, ensure_schema
from memjobs_worker.knowledge.schema import knowledge_documents, knowledge_meta
from memjobs_worker.schema import schema_drift, schema_metadata

#: The newest migration of the core branch (a new core migration moves it).
CORE_HEAD = "0012_owner_erasures"
#: The newest migration of the knowledge branch.
KNOWLEDGE_HEAD = "0009_knowledge_embedding_cache"

KNOWLEDGE_TABLES = {t.name for t in schema_metadata().tables.values() if branch_of(t) == KNOWLEDGE}
CORE_TABLES = {t.name for t in schema_metadata().tables.values() if branch_of(t) == CORE}


@pytest.fixture
def empty_engine(pg_server: EmbeddedPostgres) -> Iterator[Engine]:
    """An engine on a brand-new database that no migration has touched."""
    name = f"m_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    engine = create_db_engine(f"postgresql://postgres@127.0.0.1:{pg_server.port}/{name}")
    yield engine
    engine.dispose()
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def tables(engine: Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names()) - {"alembic_version"}


def heads(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars())


def test_the_metadata_names_both_branches() -> None:
    assert {
        "knowledge_documents",
        "knowledge_chunks",
        "knowledge_meta",
        "knowledge_embedding_cache",
    } == KNOWLEDGE_TABLES
    assert {"sources", "provenance", "memory_documents", "tasks"} <= CORE_TABLES


@pytest.mark.filterwarnings("error::sqlalchemy.exc.SAWarning")  # e.g. a column type not reflected
def test_a_database_migrated_with_knowledge_matches_the_metadata(empty_engine: Engine) -> None:
    migrate(empty_engine, knowledge=True)
    assert tables(empty_engine) == CORE_TABLES | KNOWLEDGE_TABLES
    with empty_engine.connect() as conn:
        assert schema_drift(conn, knowledge=True) == []


def test_knowledge_off_creates_no_knowledge_table(empty_engine: Engine) -> None:
    migrate(empty_engine)
    assert tables(empty_engine) == CORE_TABLES
    assert heads(empty_engine) == {CORE_HEAD}
    with empty_engine.connect() as conn:
        assert schema_drift(conn, knowledge=False) == []


def test_drift_between_the_definitions_and_the_database_is_found(empty_engine: Engine) -> None:
    migrate(empty_engine, knowledge=True)
    with empty_engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE tasks ADD COLUMN note text"))
        conn.execute(sa.text("DROP INDEX knowledge_chunks_hash"))
        # Only noticed if reflection knows pgvector's type (else it is skipped, unknown).
        conn.execute(sa.text("ALTER TABLE knowledge_chunks ALTER COLUMN tokens TYPE vector USING NULL"))
        conn.execute(sa.text("CREATE TABLE stray (id int)"))
        conn.execute(sa.text("CREATE TABLE mem0_memories_64 (id int)"))  # mem0's own: not drift
    with empty_engine.connect() as conn:
        drift = schema_drift(conn, knowledge=True)
    # A change is a tuple (kind, ...); changes to one column come as a list of them.
    found = {(d[0][0] if isinstance(d, list) else d[0]) for d in drift}
    names = repr(drift)
    assert found == {"remove_column", "add_index", "modify_type", "remove_table"}
    assert "stray" in names and "'tokens'" in names and "mem0_memories_64" not in names


def test_knowledge_switched_on_later_adds_its_branch_only(empty_engine: Engine) -> None:
    migrate(empty_engine)
    ensure_schema(empty_engine)
    assert tables(empty_engine) == CORE_TABLES | KNOWLEDGE_TABLES
    assert heads(empty_engine) == {CORE_HEAD, KNOWLEDGE_HEAD}
    assert not KnowledgeStore(empty_engine).index_is_stale()  # a new index: current tokenizer
    migrate(empty_engine)  # knowledge off again: nothing to do, nothing dropped
    assert tables(empty_engine) == CORE_TABLES | KNOWLEDGE_TABLES


def test_tables_created_before_the_knowledge_migration_are_adopted(empty_engine: Engine) -> None:
    """Until the knowledge migration existed, ensure_schema ran create_all on the
    same definitions and recorded the tokenizer version; such a database keeps
    its documents, joins the branch and then matches the metadata."""
    migrate(empty_engine)
    old_version = str(TOKENIZER_VERSION - 1)
    with empty_engine.begin() as conn:
        schema_metadata().create_all(conn, tables=[schema_metadata().tables[n] for n in KNOWLEDGE_TABLES])
        conn.execute(knowledge_meta.insert().values(key="tokenizer_version", value=old_version))
        conn.execute(
            knowledge_documents.insert().values(
                owner_key="k" * 64,
                doc_id="d1",
                title="t",
                source_label="doc:d1",
                state="refused",
                reason="too_large",
                chars=0,
                chunks=0,
                updated_at=sa.func.now(),
            )
        )
    ensure_schema(empty_engine)
    assert heads(empty_engine) == {CORE_HEAD, KNOWLEDGE_HEAD}
    store = KnowledgeStore(empty_engine)
    assert [d.doc_id for d in store.documents("k" * 64)] == ["d1"]
    assert store.index_is_stale()  # the old tokenizer version is kept, so start-up rebuilds
    store.rebuild_index()
    assert not store.index_is_stale()
    with empty_engine.connect() as conn:
        assert schema_drift(conn, knowledge=True) == []


def test_a_schema_migrated_by_a_newer_memjobs_is_a_configuration_error(empty_engine: Engine) -> None:
    migrate(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099_from_the_future'"))
    with pytest.raises(ConfigurationError) as info:
        migrate(empty_engine)
    assert "0099_from_the_future" in str(info.value) and "newer memjobs" in str(info.value)
    assert heads(empty_engine) == {"0099_from_the_future"}  # nothing was changed


def test_the_heads_migrate_skips_alembic_at_are_the_scripts_heads() -> None:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(Path(db_package.__file__).parent / "migrations"))
    assert {branch: script.get_revision(f"{branch}@head").revision for branch in (CORE, KNOWLEDGE)} == HEADS
    assert HEADS == {CORE: CORE_HEAD, KNOWLEDGE: KNOWLEDGE_HEAD}


def test_a_database_at_head_is_not_handed_to_alembic(empty_engine: Engine) -> None:
    """A worker finding its schema migrated checks the revisions only (Alembic stays
    unimported): shown by a table dropped behind Alembic's back staying dropped."""
    migrate(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE memory_audit"))
    migrate(empty_engine)
    assert "memory_audit" not in tables(empty_engine)
    ensure_schema(empty_engine)  # the knowledge branch missing: migrated
    assert heads(empty_engine) == {CORE_HEAD, KNOWLEDGE_HEAD}


def test_migrating_apart_runs_the_migrations_in_a_child_and_brings_its_refusal_back(empty_engine: Engine) -> None:
    url = empty_engine.url.render_as_string(hide_password=False)
    migrate_apart(url)
    assert tables(empty_engine) == CORE_TABLES and heads(empty_engine) == {CORE_HEAD}
    with empty_engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099_from_the_future'"))
    with pytest.raises(ConfigurationError) as info:
        migrate_apart(url)
    assert "0099_from_the_future" in str(info.value) and "newer memjobs" in str(info.value)


def test_advisory_lock_keys_are_distinct_and_fit_their_form() -> None:
    one_key, classes = list(advisory.ONE_KEY_LOCKS.values()), list(advisory.TWO_KEY_CLASSES.values())
    assert len(set(one_key)) == len(one_key) and len(set(classes)) == len(classes)
    assert all(-(1 << 63) <= k < (1 << 63) for k in one_key)
    assert all(-(1 << 31) <= k < (1 << 31) for k in classes)
    assert {advisory.owner_lock_key(h * 64) for h in "0f"} == {0, -1}
