"""Reading one document from a local file, refused with a reason when it must not be read.

What: :func:`read_document` turns a path a host named into the document's
text and public labels, or raises :class:`Refused` with one short reason.

Why every step is here, in this order: a folder is hostile input. A name that
is not valid UTF-8, a symlink loop, a dangling link, a file that vanished
since it was listed, a FIFO, a device or a permission error must each refuse
*that* document and nothing else, and never put the path in an error or a log
line (the reason and the public id say enough). The path is resolved (all
symlinks followed) before the root check, so a link out of the allowed roots
is refused; the resolved path must sit under one of the roots the reindex
names *and* under one of the host's roots (``MEMJOBS_KNOWLEDGE_ROOTS``). The
file is opened without following a last-moment symlink and without blocking
(a FIFO swapped in after the check cannot hang the worker), and checked to be
a regular file on the open descriptor itself.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memjobs_client.contracts import knowledge_path_id
from memjobs_client.sensitive import find_sensitive_path


@dataclass(frozen=True)
class Resolved:
    """A document ready to chunk: its id, title, public label and text."""

    doc_id: str
    title: str
    source_label: str
    text: str


class Refused(Exception):
    """A document refused, with the reason recorded for the owner to see."""

    def __init__(self, doc_id: str, title: str, reason: str) -> None:
        super().__init__(reason)
        self.doc_id, self.title, self.reason = doc_id, title, reason


def public_name(name: str) -> str:
    """A file name safe to show and store: bytes that are not UTF-8 as ``\\xNN``,
    control characters escaped, at most 200 characters."""
    shown = os.fsencode(name).decode("utf-8", "backslashreplace")
    shown = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in shown)
    return shown[:200] or "file"


def is_valid_name(path: str) -> bool:
    """True when ``path`` is valid Unicode (no undecodable bytes smuggled as surrogates)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_document(raw: str, roots: Sequence[str], host_roots: Sequence[Path], *, max_bytes: int) -> Resolved:
    """The text of the file at ``raw``; see the module docstring for the rules.

    Raises:
        Refused: with reason ``undecodable_name``, ``sensitive_path``,
            ``path_not_absolute``, ``symlink_loop``, ``missing``, ``broken_link``,
            ``path_not_allowed``, ``not_a_file``, ``unreadable``, ``too_large``,
            ``binary`` or ``undecodable``.
    """
    doc_id = knowledge_path_id(raw)
    title = public_name(os.path.basename(raw))
    if not is_valid_name(raw):
        raise Refused(doc_id, title, "undecodable_name")
    if find_sensitive_path(raw) is not None:
        raise Refused(doc_id, "file", "sensitive_path")  # even the name is withheld
    if not os.path.isabs(raw):
        raise Refused(doc_id, title, "path_not_absolute")
    real = _resolve(raw, doc_id, title)
    if not _under(real, _resolve_roots(roots)) or not _under(real, host_roots):
        raise Refused(doc_id, title, "path_not_allowed")
    if find_sensitive_path(str(real)) is not None:
        raise Refused(doc_id, "file", "sensitive_path")
    data = _read_regular(real, doc_id, title, max_bytes)
    if b"\x00" in data:
        raise Refused(doc_id, title, "binary")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(doc_id, title, "undecodable") from None
    return Resolved(doc_id, title, f"file:{title}", text)


def _resolve(raw: str, doc_id: str, title: str) -> Path:
    try:
        return Path(raw).resolve(strict=True)
    except RuntimeError:  # Python < 3.13 reports a symlink loop this way
        raise Refused(doc_id, title, "symlink_loop") from None
    except OSError as exc:
        reason = _os_reason(exc)
        if reason == "missing" and os.path.lexists(raw):
            reason = "broken_link"  # the name is there, what it points to is not
        raise Refused(doc_id, title, reason) from None


def _resolve_roots(roots: Sequence[str]) -> list[Path]:
    resolved = []
    for root in roots:
        if not is_valid_name(root) or not os.path.isabs(root):
            continue
        try:
            resolved.append(Path(root).resolve(strict=True))
        except (OSError, RuntimeError):
            continue  # a root that does not resolve allows nothing
    return resolved


def _under(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _read_regular(real: Path, doc_id: str, title: str, max_bytes: int) -> bytes:
    """The bytes of a regular file, opened without following a link or blocking."""
    try:
        if not stat.S_ISREG(os.stat(real).st_mode):
            raise Refused(doc_id, title, "not_a_file")
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise Refused(doc_id, title, "not_a_file")
            if info.st_size > max_bytes:
                raise Refused(doc_id, title, "too_large")
            with os.fdopen(fd, "rb", closefd=False) as handle:
                data = handle.read(max_bytes + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise Refused(doc_id, title, _os_reason(exc)) from None
    if len(data) > max_bytes:
        raise Refused(doc_id, title, "too_large")  # it grew since fstat
    return data


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink_loop"
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return "missing"
    return "unreadable"
