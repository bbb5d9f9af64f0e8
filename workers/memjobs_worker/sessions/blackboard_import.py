"""Import the seeds' SQLite blackboard (``NOVA_AUDIO_AGENT_BLACKBOARD_PATH``) into
the state database, so sessions a gateway kept on one host follow it to any.

The seeds' store (``blackboard-store.ts``) keeps one row per entry of a
session's L0 blackboard: its owner (``NOVA_AUDIO_AGENT_BLACKBOARD_OWNER_ID``),
session, id, place in the event order, time, trust level, priority, kind,
result and evidence references (a JSON array). The table this reads::

    CREATE TABLE blackboard_entries (
      owner_id TEXT NOT NULL, session_id TEXT NOT NULL, entry_id TEXT NOT NULL,
      seq INTEGER NOT NULL, recorded_at_ms INTEGER NOT NULL, trust TEXT NOT NULL,
      priority INTEGER NOT NULL DEFAULT 0, kind TEXT, result TEXT NOT NULL DEFAULT '',
      evidence TEXT NOT NULL DEFAULT '[]', PRIMARY KEY (owner_id, session_id, entry_id))

The time may also be an ISO 8601 ``at`` column; without an ``owner_id``
column every row is the named owner's. The file is opened read-only.

Each row is validated as the job validates an append (the same contract and
credential check): a row that fails is skipped and counted by reason, never
stored. Stored through :meth:`BlackboardStore.append`, so an import is
idempotent (entry ids) and kept within the three limits like any append.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memjobs_client.contracts import MAX_BLACKBOARD_APPEND, BlackboardEntry
from memjobs_client.errors import InvalidPayload, MemjobsError, SensitiveContent
from memjobs_client.validation import validate
from memjobs_worker.sessions.blackboard import BlackboardStore

TABLE = "blackboard_entries"


@dataclass
class Imported:
    """What an import did: entries stored, already there, dropped by a limit, refused (by reason)."""

    sessions: int = 0
    added: int = 0
    duplicates: int = 0
    dropped: int = 0
    refused: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "added": self.added,
            "duplicates": self.duplicates,
            "dropped": self.dropped,
            "refused": dict(self.refused),
        }


def read_rows(path: Path, owner_id: str) -> dict[str, list[dict[str, Any]]]:
    """The owner's rows of the SQLite blackboard at ``path``, by session.

    Raises:
        InvalidPayload: no such file, not SQLite, or no ``blackboard_entries`` table.
    """
    if not path.is_file():
        raise InvalidPayload(f"--path: no SQLite blackboard at {path}")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise InvalidPayload(f"--path: cannot open it as SQLite ({type(exc).__name__})") from None
    try:
        conn.row_factory = sqlite3.Row
        columns = {row["name"] for row in conn.execute(f"PRAGMA table_info({TABLE})")}
        if not columns:
            raise InvalidPayload(f"--path: no {TABLE} table: not the seeds' blackboard")
        where, params = ("WHERE owner_id = ?", (owner_id,)) if "owner_id" in columns else ("", ())
        rows = conn.execute(f"SELECT * FROM {TABLE} {where}", params).fetchall()  # noqa: S608
    except sqlite3.DatabaseError as exc:
        raise InvalidPayload(f"--path: not a readable SQLite blackboard ({type(exc).__name__})") from None
    finally:
        conn.close()
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(str(row["session_id"]), []).append(dict(row))
    return out


def as_entry(row: dict[str, Any]) -> dict[str, Any]:
    """A row as the append contract takes it (the contract then judges it)."""
    if row.get("recorded_at_ms") is not None:
        at: Any = datetime.fromtimestamp(int(row["recorded_at_ms"]) / 1000, UTC).isoformat()
    else:
        at = row.get("at")
    evidence = row.get("evidence")
    if isinstance(evidence, str):
        try:
            evidence = json.loads(evidence)
        except ValueError:
            evidence = [evidence]
    return {
        "entry_id": row.get("entry_id"),
        "seq": row.get("seq"),
        "at": at,
        "trust": row.get("trust"),
        "priority": row.get("priority") or 0,
        "kind": row.get("kind"),
        "result": row.get("result") or "",
        "evidence": evidence or [],
    }


def import_sqlite(store: BlackboardStore, path: Path, owner_id: str, owner_key: str) -> Imported:
    """Import the owner's sessions from the SQLite blackboard at ``path``.

    Raises:
        InvalidPayload: the file is not the seeds' blackboard.
        BackendUnavailable: the database did not answer (run it again: idempotent).
    """
    done = Imported()
    for session_id, rows in read_rows(path, owner_id).items():
        entries: list[BlackboardEntry] = []
        for row in rows:
            try:
                entries.append(validate(BlackboardEntry, as_entry(row)))
            except SensitiveContent:
                done.refused["sensitive_content"] += 1
            except (InvalidPayload, MemjobsError, ValueError, TypeError):
                done.refused["invalid"] += 1
        if not entries:
            continue
        done.sessions += 1
        for i in range(0, len(entries), MAX_BLACKBOARD_APPEND):
            result = store.append(owner_key, session_id, entries[i : i + MAX_BLACKBOARD_APPEND])
            done.added += result.added
            done.duplicates += result.duplicates
            done.dropped += result.dropped
    return done
