"""``memjobs backup`` and ``memjobs restore`` of the embedded stack.

Backup, while the stack runs and works: (1) Redis's snapshot (``BGSAVE``), (2)
PostgreSQL's dump (``pg_dump``, one MVCC snapshot), (3) the Markdown memory
files (each owner's read under its writers' lock), (4) the effective settings
with every secret left out; one tar with a manifest (:mod:`.archive`).

Why Redis first: every job is idempotent and written to the ledger before it
is acknowledged, so a job that finished between the two snapshots is in the
Redis snapshot *and* its effect in the dump: restored, it runs again and
changes nothing. The other order would lose it (gone from Redis, not yet in
the dump). Fencing tokens in Redis older than the ledger's are harmless: the
ledger's newest token is the floor of the next one (DESIGN.md, the learning lock).

Restore, into a new or empty directory only: check the archive (format,
checksums, schema revisions: one this memjobs does not know was made by a newer
memjobs and is refused before anything is written), then PostgreSQL (a fresh
cluster, ``pg_restore`` in one transaction, then the migrations bring an older
schema to head), then Redis (the snapshot becomes the append-only file the
stack's Redis starts from; jobs in flight at the backup go back to their
queues), then the memory files. A failed restore leaves the directory empty.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
from sqlalchemy.exc import SQLAlchemyError

from memjobs_client.errors import BackendUnavailable, ConfigurationError, InvalidPayload
from memjobs_worker.db import create_db_engine, migrate
from memjobs_worker.db.migrate import current_revisions, known_revisions
from memjobs_worker.embedded.postgres import EmbeddedPostgres
from memjobs_worker.embedded.stack import StackLock, private_dir, read_stack
from memjobs_worker.ops.archive import (
    MEMORY_PREFIX,
    POSTGRES_DUMP,
    REDIS_RDB,
    SETTINGS,
    ArchiveWriter,
    BadArchive,
    Manifest,
    extract_verified,
    read_manifest,
)
from memjobs_worker.ops.snapshots import load_redis_snapshot, pg_dump, pg_restore, redis_snapshot, scrub_snapshot
from memjobs_worker.settings import Settings

Progress = Callable[[str], None]

#: The files of an owner's Markdown memory directory worth keeping (not its lock).
MEMORY_FILES = ("USER.md", "MEMORY.md", ".versions.json")
_OWNER_DIR = re.compile(r"[0-9a-f]{64}")
#: Settings whose difference between the backed-up stack and the restoring host
#: changes what the restored data means.
COMPARED_SETTINGS = (
    "memory.provider",
    "knowledge.mode",
    "sessions.memory_docs_provider",
    "embedding.local_embedder",
    "embedding.base_url",
    "embedding.model",
    "embedding.dims",
)


def memjobs_version() -> str:
    try:
        return importlib.metadata.version("memjobs")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _quiet(_line: str) -> None:
    pass


def backup(settings: Settings, output: Path, *, progress: Progress = _quiet) -> dict[str, Any]:
    """Write a backup of the stack running in ``settings.data_dir`` to ``output``.

    Raises:
        ConfigurationError: no stack runs there, or its Redis is not the embedded one.
        InvalidPayload: ``output`` exists (never overwritten).
        BackendUnavailable: a server did not answer, or a snapshot failed.
    """
    data_dir = settings.data_dir
    stack = read_stack(data_dir)
    if stack is None:
        raise ConfigurationError(
            f"no memjobs stack is running in {data_dir}: start it with "
            "`memjobs up` (a backup reads the running servers)"
        )
    if stack.redis_pid is None:
        raise ConfigurationError(
            "this stack's Redis is configured elsewhere (MEMJOBS_REDIS_URL): "
            "back up a deployment with its own tools (docs/operations.md, "
            '"Backup and restore")'
        )
    if output.exists():
        raise InvalidPayload(f"{output} exists: a backup never overwrites a file", reason="exists")
    if not output.parent.is_dir():
        raise InvalidPayload(f"{output.parent} is not a directory", reason="invalid_payload")
    writer = ArchiveWriter(output)
    try:
        with tempfile.TemporaryDirectory(dir=output.parent, prefix=".memjobs-backup-") as tmp:
            work = Path(tmp)
            client = redis.Redis.from_url(stack.redis_url, socket_timeout=30)
            try:
                redis_version = redis_snapshot(client, work / REDIS_RDB)
            finally:
                client.close()
            held = scrub_snapshot(work / REDIS_RDB)
            writer.add_file(REDIS_RDB, work / REDIS_RDB)
            progress(
                f"redis: snapshot of {_size(work / REDIS_RDB)} (Redis {redis_version}): "
                f"{held['queued']} job(s) queued, {held['dead']} dead letter(s)"
            )
            engine = create_db_engine(stack.database_url, pool_size=1)
            try:
                revisions = current_revisions(engine)
            except SQLAlchemyError as exc:
                raise BackendUnavailable(f"the state database did not answer: {type(exc).__name__}") from exc
            finally:
                engine.dispose()
            pg_dump(stack.database_url, work / POSTGRES_DUMP)
            writer.add_file(POSTGRES_DUMP, work / POSTGRES_DUMP)
            progress(f"postgres: dump of {_size(work / POSTGRES_DUMP)} (schema {', '.join(revisions)})")
            owners = _add_memory_files(writer, data_dir / "memory")
            if owners:
                progress(f"memory files: {owners} owner(s)")
            kept, omitted = settings_without_secrets(settings)
            writer.add_bytes(SETTINGS, json.dumps(kept, indent=1, ensure_ascii=False).encode())
            progress(f"settings: {len(kept)} kept; left out, as secrets: {', '.join(omitted)}")
            manifest = Manifest(
                memjobs_version(),
                datetime.now(UTC).isoformat(timespec="seconds"),
                revisions,
                details={
                    "postgres": {"dump": POSTGRES_DUMP, "format": "custom"},
                    "redis": {"snapshot": REDIS_RDB, "version": redis_version, **held},
                    "memory_files": {"owners": owners},
                    "settings": {"file": SETTINGS, "secrets_left_out": omitted},
                    "order": ["redis", "postgres", "memory_files"],
                },
            )
            writer.finish(manifest)
    except BaseException:
        writer.abandon()
        raise
    return {
        "archive": str(output),
        "bytes": output.stat().st_size,
        "schema": revisions,
        "memory_owners": owners,
        "created_at": manifest.created_at,
    }


def _add_memory_files(writer: ArchiveWriter, root: Path) -> int:
    """Each owner's documents, read while holding the lock its writers take."""
    if not root.is_dir():
        return 0
    owners = 0
    for directory in sorted(root.iterdir()):
        if not directory.is_dir() or directory.is_symlink() or not _OWNER_DIR.fullmatch(directory.name):
            continue
        lock = directory / ".lock"
        fd = os.open(lock, os.O_RDONLY) if lock.exists() else None
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_SH)
            files = {
                name: (directory / name).read_bytes()
                for name in MEMORY_FILES
                if (directory / name).is_file() and not (directory / name).is_symlink()
            }
        finally:
            if fd is not None:
                os.close(fd)
        for name, data in files.items():
            writer.add_bytes(f"{MEMORY_PREFIX}{directory.name}/{name}", data)
        owners += bool(files)
    return owners


def settings_without_secrets(settings: Settings) -> tuple[dict[str, Any], list[str]]:
    """The effective settings, every secret (keys, tokens, passwords) left out
    entirely; returns them and the names left out."""
    secrets = {entry.key for entry in settings.entries() if entry.secret}
    kept: dict[str, Any] = {}
    omitted: list[str] = []
    for name, value in settings.redacted().items():
        if name in secrets or (isinstance(value, str) and "[REDACTED]" in value):
            omitted.append(name)
        else:
            kept[name] = value
    return kept, omitted


def _size(path: Path) -> str:
    size = float(path.stat().st_size)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


# --- restore ------------------------------------------------------------------------


def check_schema(manifest: Manifest) -> bool:
    """Refuse an archive of a newer schema; return whether it holds knowledge.

    Raises:
        BadArchive: a revision these migrations do not know (reason ``newer_schema``).
    """
    known = known_revisions()
    unknown = [r for r in manifest.schema_revisions if r not in known]
    if unknown:
        raise BadArchive(
            f"the archive's database schema ({', '.join(unknown)}) is newer than this memjobs "
            f"({memjobs_version()}) knows: it was made by memjobs {manifest.memjobs_version}; "
            "restore it with that version or a newer one",
            reason="newer_schema",
        )
    if not manifest.schema_revisions:
        raise BadArchive("the archive's database was never migrated: nothing to restore")
    return any(known[r] == "knowledge" for r in manifest.schema_revisions)


def restore_database(database_url: str, dump: Path, *, knowledge: bool) -> list[str]:
    """Restore ``dump`` into the empty database of ``database_url`` (one
    transaction), then migrate it to this memjobs' head (the knowledge branch
    too when the dump has it). Returns its revisions.

    Raises:
        BackendUnavailable: pg_restore failed.
        ConfigurationError: the migrations failed.
    """
    pg_restore(database_url, dump)
    engine = create_db_engine(database_url, pool_size=1)
    try:
        migrate(engine, knowledge=knowledge)
        return current_revisions(engine)
    finally:
        engine.dispose()


def restore(settings: Settings, archive: Path, data_dir: Path, *, progress: Progress = _quiet) -> dict[str, Any]:
    """Restore ``archive`` into the new or empty ``data_dir``.

    Raises:
        InvalidPayload: no such archive, or ``data_dir`` is not empty.
        BadArchive: not a memjobs backup, damaged, or of a newer schema.
        ConfigurationError: a server would not start or load.
    """
    if not archive.is_file():
        raise InvalidPayload(f"{archive}: no such file", reason="not_found")
    manifest = read_manifest(archive)
    knowledge = check_schema(manifest)
    os.umask(0o077)  # everything restored is owner-only, as under `memjobs up`
    if data_dir.exists() and (not data_dir.is_dir() or any(data_dir.iterdir())):
        raise InvalidPayload(
            f"{data_dir} is not empty: restore into a new or empty directory "
            "(a restore never writes over a data directory)",
            reason="not_empty",
        )
    private_dir(data_dir)
    lock = StackLock(data_dir)
    if not lock.acquire():
        raise InvalidPayload(f"{data_dir} is in use by a memjobs stack", reason="not_empty")
    postgres = EmbeddedPostgres(data_dir / "postgres")
    done = False
    try:
        work = Path(tempfile.mkdtemp(dir=data_dir, prefix=".restore-"))
        extract_verified(archive, manifest, work)
        progress(
            f"archive: {len(manifest.contents)} members checked (made {manifest.created_at} "
            f"by memjobs {manifest.memjobs_version})"
        )
        url = postgres.start()
        try:
            revisions = restore_database(url, work / POSTGRES_DUMP, knowledge=knowledge)
        finally:
            postgres.stop()
        migrated = revisions != manifest.schema_revisions
        progress(
            f"postgres: restored, schema {', '.join(revisions)}"
            + (f" (migrated from {', '.join(manifest.schema_revisions)})" if migrated else "")
        )
        counts = load_redis_snapshot(work / REDIS_RDB, data_dir / "redis")
        progress(
            f"redis: restored, {counts['queued']} job(s) queued ({counts['returned']} of them "
            f"in flight at the backup, back on their queues), {counts['dead']} dead letter(s)"
        )
        if (work / "memory").is_dir():
            os.replace(work / "memory", data_dir / "memory")
            progress(f"memory files: {manifest.details.get('memory_files', {}).get('owners', 0)} owner(s)")
        notices = _compare_settings(work / SETTINGS, settings)
        shutil.rmtree(work)
        done = True
    finally:
        if not done:
            postgres.stop()
            lock.release()
            for child in data_dir.iterdir():
                shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
    lock.release()
    return {
        "data_dir": str(data_dir),
        "schema": revisions,
        "schema_before": manifest.schema_revisions,
        "migrated": migrated,
        "queued": counts["queued"],
        "returned_to_queues": counts["returned"],
        "dead_letters": counts["dead"],
        "notices": notices,
    }


def _compare_settings(path: Path, settings: Settings) -> list[str]:
    """Where this host's settings differ from the backed-up stack's, in ways that
    change what the restored data means."""
    try:
        then = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    now = settings.redacted()
    return [
        f"{name} was {then.get(name)!r} in the backed-up stack, is {now.get(name)!r} here"
        for name in COMPARED_SETTINGS
        if name in then and then.get(name) != now.get(name)
    ]
