"""The built-in memory provider: plain Markdown files the user can open.

Layout under ``root`` (``data_dir/memory`` by default)::

    <owner_key>/USER.md          the documents, plain UTF-8 Markdown
    <owner_key>/MEMORY.md
    <owner_key>/.versions.json   {"MEMORY.md": {"version": 7, "sha256": "..."}}
    <owner_key>/.lock            flock target serialising the owner's writers

The owner directory is named by the owner key (the sha256 of the owner id the
provider is given, :func:`storage_key`), so the raw owner id never appears in a path.

Why a sidecar with a hash: versions must be integers the service can compare,
and the user may edit a file by hand. The effective version of a document is
the recorded one when the file's sha256 matches the recorded hash, else the
recorded one plus one: an outside edit (or a crash between the two renames of
a write) counts as a change, so a writer that read before it conflicts and
re-reads instead of overwriting the edit.

Writes are atomic (temporary file in the same directory, fsync, ``os.replace``,
fsync of the directory) and serialised per owner across processes and threads
on one host by ``fcntl.flock`` on ``.lock``. Several hosts need the SQL provider.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from memjobs_client.errors import BackendUnavailable
from memjobs_worker.sessions.memory_docs import protocol

VERSIONS_FILE = ".versions.json"
LOCK_FILE = ".lock"
#: Bytes of a document file read at most (a file grown by hand past this is cut).
MAX_FILE_BYTES = 4 * 1024 * 1024

_Versions = dict[str, tuple[int, str | None]]  # doc -> (recorded version, sha256)


class MarkdownFileProvider(protocol.MemoryProvider):
    """USER.md and MEMORY.md as files under ``root/<owner_key>/``.

    Parameters:
        root: the directory holding one sub-directory per owner; created on
            the first write (mode 0700).
    """

    accepts_owner_keys = True

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._local = threading.local()

    def describe(self) -> protocol.ProviderInfo:
        return protocol.ProviderInfo(protocol.PROTOCOL_VERSION, "markdown", "Markdown files")

    def owner_dir(self, owner_id: str) -> Path:
        """Where the owner's documents are (it may not exist yet)."""
        return self.root / protocol.storage_key(owner_id)

    # -- reading ------------------------------------------------------------------

    def list(self, owner_id: str, options: protocol.ListOptions) -> builtins.list[protocol.Document]:
        directory = self.owner_dir(owner_id)
        max_docs, max_chars = options.max_docs, options.max_chars
        try:
            # The sidecar first, then the files: a write renames the file before
            # the sidecar, so a reader between the two sees a hash mismatch and
            # the version that write is about to record.
            versions = _read_versions(directory)
            found: builtins.list[protocol.Document] = []
            for doc in protocol.WRITABLE_DOCS[: max(max_docs, 0)]:
                data = _read_bytes(directory / doc)
                if data is None and doc not in versions:
                    continue
                content = (data or b"").decode("utf-8", errors="replace")[: max(max_chars, 0)]
                found.append(protocol.writable_document(doc, content, _effective(versions, doc, data)))
        except OSError as exc:
            raise BackendUnavailable(f"memory files unreadable: {exc.strerror}") from exc
        return found

    # -- writing ------------------------------------------------------------------

    def serialise(self, owner_id: str) -> contextlib.AbstractContextManager[None]:
        """Hold the owner's ``.lock`` (reentrant within a thread)."""
        return self._locked(protocol.storage_key(owner_id))

    @contextlib.contextmanager
    def _locked(self, owner_key: str) -> Iterator[None]:
        held: set[str] = self._local.__dict__.setdefault("held", set())
        if owner_key in held:
            yield
            return
        directory = self.root / owner_key
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise BackendUnavailable(f"memory directory unusable: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held.add(owner_key)
            try:
                yield
            finally:
                held.discard(owner_key)
        finally:
            os.close(fd)  # releases the flock

    def apply(
        self, owner_id: str, changes: Sequence[protocol.Change], context: protocol.ChangeContext
    ) -> protocol.ApplyResult:
        """Write every change or none: the versions are all checked before the first write."""
        protocol.check_writable(changes)
        key = protocol.storage_key(owner_id)
        directory = self.root / key
        written: builtins.list[protocol.Document] = []
        with self._locked(key):
            try:
                versions = _read_versions(directory)
                current = {c.doc: _effective(versions, c.doc, _read_bytes(directory / c.doc)) for c in changes}
                for change in changes:
                    protocol.check_version(change, current[change.doc])
                for change in changes:
                    data = change.content.encode("utf-8")
                    current[change.doc] += 1
                    _atomic_write(directory / change.doc, data)
                    versions[change.doc] = (current[change.doc], hashlib.sha256(data).hexdigest())
                    written.append(protocol.writable_document(change.doc, change.content, current[change.doc]))
                if changes:
                    _atomic_write(directory / VERSIONS_FILE, _dump_versions(versions))
            except OSError as exc:
                raise BackendUnavailable(f"memory file not written: {exc.strerror}") from exc
        return protocol.ApplyResult(len(written), tuple(written))

    def health(self) -> protocol.Health:
        probe = self.root if self.root.exists() else self.root.parent
        if os.access(probe, os.W_OK | os.X_OK):
            return protocol.Health(True, "")
        return protocol.Health(False, "memory directory is not writable")

    def close(self) -> None:
        """Nothing is held between calls."""


def _read_bytes(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read(MAX_FILE_BYTES)
    except FileNotFoundError:
        return None


def _read_versions(directory: Path) -> _Versions:
    """The sidecar; a missing or damaged one reads as "nothing recorded"."""
    raw = _read_bytes(directory / VERSIONS_FILE)
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    versions: _Versions = {}
    if isinstance(data, dict):
        for doc in protocol.WRITABLE_DOCS:
            entry = data.get(doc)
            if not isinstance(entry, dict):
                continue
            version, digest = entry.get("version"), entry.get("sha256")
            if isinstance(version, int) and not isinstance(version, bool) and version >= 0:
                versions[doc] = (version, digest if isinstance(digest, str) else None)
    return versions


def _dump_versions(versions: _Versions) -> bytes:
    data = {doc: {"version": v, "sha256": h} for doc, (v, h) in sorted(versions.items())}
    return json.dumps(data, indent=1).encode("utf-8") + b"\n"


def _effective(versions: _Versions, doc: str, data: bytes | None) -> int:
    """The recorded version, plus one if the file changed behind the sidecar's back."""
    recorded, digest = versions.get(doc, (0, None))
    content = data or b""
    if recorded == 0 and digest is None:
        return 1 if content else 0  # a file created by hand counts as one write
    return recorded if digest == hashlib.sha256(content).hexdigest() else recorded + 1


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, whole."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.name)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
