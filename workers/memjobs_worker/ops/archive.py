"""The backup archive: one tar file, its members listed with their sizes and
sha256 in ``manifest.json`` (written last, read first).

Members: ``postgres.dump`` (``pg_dump --format=custom``), ``redis.rdb`` (a
``BGSAVE``), ``memory/<owner key>/…`` (the Markdown memory files, when they are
files), ``settings.json`` (the effective settings, secrets left out) and
``manifest.json``. Reading refuses an archive whose manifest is missing or of
another format, a member the manifest does not list (or lists and is absent),
a checksum that does not match, and any path that is not plain and relative.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from memjobs_client.errors import InvalidPayload

FORMAT = "memjobs-backup"
#: The archive's own layout; a reader refuses a newer one.
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
POSTGRES_DUMP = "postgres.dump"
REDIS_RDB = "redis.rdb"
SETTINGS = "settings.json"
MEMORY_PREFIX = "memory/"
_CHUNK = 1 << 20


class BadArchive(InvalidPayload):
    """The file is not a memjobs backup this memjobs can read, or it is damaged."""

    def __init__(self, message: str, reason: str = "bad_archive") -> None:
        super().__init__(message, reason=reason)


@dataclass
class Manifest:
    """What an archive holds and what made it."""

    memjobs_version: str
    created_at: str
    schema_revisions: list[str]
    contents: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def as_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": self.format_version,
            "memjobs_version": self.memjobs_version,
            "created_at": self.created_at,
            "schema": {"revisions": self.schema_revisions},
            **self.details,
            "contents": self.contents,
        }

    @classmethod
    def parse(cls, raw: bytes) -> Manifest:
        try:
            data = json.loads(raw)
            if data.get("format") != FORMAT:
                raise BadArchive("not a memjobs backup (its manifest names another format)")
            version = int(data["format_version"])
            if version > FORMAT_VERSION:
                raise BadArchive(
                    f"the archive's format {version} is newer than this memjobs reads "
                    f"({FORMAT_VERSION}): restore it with the memjobs that made it "
                    f"({data.get('memjobs_version')}) or newer",
                    reason="newer_archive",
                )
            known = {"format", "format_version", "memjobs_version", "created_at", "schema", "contents"}
            return cls(
                str(data["memjobs_version"]),
                str(data["created_at"]),
                [str(r) for r in data["schema"]["revisions"]],
                [dict(c) for c in data["contents"]],
                {k: v for k, v in data.items() if k not in known},
                version,
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BadArchive(f"the archive's manifest is unreadable ({type(exc).__name__})") from None


class ArchiveWriter:
    """Add files to a new tar at ``path`` (owner-only), then :meth:`finish` with the manifest."""

    def __init__(self, path: Path) -> None:
        self.path = path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self._file = os.fdopen(fd, "wb")
        self._tar = tarfile.open(fileobj=self._file, mode="w")  # noqa: SIM115 - closed in finish()
        self.contents: list[dict[str, Any]] = []

    def add_file(self, name: str, source: Path) -> None:
        digest = hashlib.sha256()
        with open(source, "rb") as f:
            for block in iter(lambda: f.read(_CHUNK), b""):
                digest.update(block)
        info = self._tar.gettarinfo(str(source), arcname=name)
        info.mode, info.uid, info.gid, info.uname, info.gname = 0o600, 0, 0, "", ""
        with open(source, "rb") as f:
            self._tar.addfile(info, f)
        self.contents.append({"name": name, "bytes": info.size, "sha256": digest.hexdigest()})

    def add_bytes(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
        self._tar.addfile(info, io.BytesIO(data))
        self.contents.append({"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})

    def finish(self, manifest: Manifest) -> None:
        manifest.contents = list(self.contents)
        data = json.dumps(manifest.as_json(), indent=1, ensure_ascii=False).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
        self._tar.addfile(info, io.BytesIO(data))
        self._tar.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def abandon(self) -> None:
        """Close and delete the half-written archive."""
        try:
            self._tar.close()
            self._file.close()
        finally:
            self.path.unlink(missing_ok=True)


def read_manifest(path: Path) -> Manifest:
    """The archive's manifest, without reading the rest.

    Raises:
        BadArchive: not a tar, no manifest, another format.
    """
    try:
        with tarfile.open(path, mode="r:") as tar:
            member = tar.getmember(MANIFEST)
            handle = tar.extractfile(member)
            if handle is None:
                raise BadArchive("the archive's manifest is not a file")
            return Manifest.parse(handle.read(1 << 20))
    except KeyError:
        raise BadArchive(f"{path} is not a memjobs backup: no {MANIFEST}") from None
    except (tarfile.TarError, OSError) as exc:
        raise BadArchive(f"{path} is not a readable tar archive: {exc}") from None


def extract_verified(path: Path, manifest: Manifest, into: Path) -> None:
    """Extract every member the manifest lists into ``into``, checking each
    one's size and sha256; refuse anything else.

    Raises:
        BadArchive: a member unlisted, missing, damaged, or with an unsafe path.
    """
    listed = {str(c["name"]): c for c in manifest.contents}
    for name in listed:
        pure = PurePosixPath(name)
        if pure.is_absolute() or ".." in pure.parts or not pure.parts:
            raise BadArchive(f"the archive names an unsafe path: {name!r}")
    seen: set[str] = set()
    try:
        with tarfile.open(path, mode="r:") as tar:
            for member in tar:
                if member.name == MANIFEST:
                    continue
                entry = listed.get(member.name)
                if entry is None or not member.isfile():
                    raise BadArchive(f"the archive holds {member.name!r}, which its manifest does not list")
                handle = tar.extractfile(member)
                assert handle is not None
                target = into / member.name
                target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                digest = hashlib.sha256()
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    while block := handle.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
                if digest.hexdigest() != entry["sha256"] or member.size != entry["bytes"]:
                    raise BadArchive(
                        f"{member.name} in the archive is damaged (its checksum does not match the manifest's)",
                        reason="damaged_archive",
                    )
                seen.add(member.name)
    except (tarfile.TarError, OSError) as exc:
        raise BadArchive(f"{path} could not be read whole: {exc}", reason="damaged_archive") from None
    missing = sorted(set(listed) - seen)
    if missing:
        raise BadArchive(
            f"the archive lacks {', '.join(missing[:5])}, which its manifest lists", reason="damaged_archive"
        )
