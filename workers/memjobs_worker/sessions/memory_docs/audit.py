"""``memory-audit.jsonl``: one JSON line per patch the memory service handled.

What each line says: when (``ts``, UTC ISO 8601), whose (``owner_key``, the
sha256, never the raw id), which session if known, which document, which
operation, whether it was applied, why not (a short reason code) and the
document's version. Never the memory text, nor ``old_text``/``new_text``: the
audit is for diagnosis, and memory text is personal.

Where: one file for every owner, ``data_dir/memory/memory-audit.jsonl``
(:func:`default_audit_path`), whichever provider stores the documents.

Why it is safe to share: each line is written with a single ``write`` on a
descriptor opened with ``O_APPEND``, and lines are far below ``PIPE_BUF``, so
lines from several threads and processes never interleave on a local disk.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from memjobs_worker.clock import Clock, utcnow
from memjobs_worker.sessions.memory_docs.protocol import WRITABLE_DOCS

AUDIT_FILE = "memory-audit.jsonl"
#: Document names recorded as given; anything else is recorded as "other"
#: (a name chosen by a model could carry text).
_NAMED_DOCS = frozenset({*WRITABLE_DOCS, "ASSISTANT.md"})
_MAX_ID_CHARS = 128


def default_audit_path(data_dir: Path) -> Path:
    """``data_dir/memory/memory-audit.jsonl``."""
    return Path(data_dir) / "memory" / AUDIT_FILE



class AuditLog:
    """Append-only JSON Lines audit of memory patches.

    Parameters:
        path: the file; its directory is created on the first record.
        clock: the time source (tests inject one).
    """

    def __init__(self, path: Path, *, clock: Clock = utcnow) -> None:
        self.path = Path(path)
        self.clock = clock

    def record(self, *, owner_key: str, doc: str, op: str, applied: bool, reason: str | None,
               version: int | None, session_id: str | None = None) -> None:
        """Append one line. Raises OSError if the file cannot be written."""
        line = {
            "ts": self.clock().isoformat(),
            "owner_key": owner_key[:_MAX_ID_CHARS],
            "session_id": session_id[:_MAX_ID_CHARS] if session_id is not None else None,
            "doc": doc if doc in _NAMED_DOCS else "other",
            "op": op,
            "applied": applied,
            "reason": reason,
            "version": version,
        }
        data = (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
