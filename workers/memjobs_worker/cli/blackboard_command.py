"""``memjobs blackboard``: the sessions' L0 blackboards.

- ``import [--path SQLITE] [--owner ID]``: the seeds' SQLite blackboard into the
  state database (defaults: ``NOVA_AUDIO_AGENT_BLACKBOARD_PATH`` and
  ``NOVA_AUDIO_AGENT_BLACKBOARD_OWNER_ID``); idempotent, rows with a credential
  refused and counted, never stored.
- ``show --owner ID --session S``: a session's live entries, in event order.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from memjobs_client.errors import InvalidPayload
from memjobs_worker.cli import exits
from memjobs_worker.cli.door import owner_arg, runtime_for
from memjobs_worker.cli.output import emit
from memjobs_worker.sessions.blackboard_import import import_sqlite
from memjobs_worker.settings import Settings


def blackboard(settings: Settings, args: argparse.Namespace) -> int:
    owner = args.owner if args.owner and args.owner.strip() else settings.blackboard.owner_id
    if not owner or not owner.strip():
        raise InvalidPayload("--owner (or NOVA_AUDIO_AGENT_BLACKBOARD_OWNER_ID) is required")
    key = owner_arg(owner)
    if args.action == "import":
        path = Path(args.path).expanduser() if args.path else settings.blackboard.path
        with runtime_for(settings) as rt:
            done = import_sqlite(rt.blackboard, path, owner, key)
        emit(done.as_dict(), as_json=args.json)
        return exits.OK
    if not args.session:
        raise InvalidPayload("--session is required")
    with runtime_for(settings) as rt:
        entries = rt.blackboard.restore(key, args.session)
    emit(
        entries,
        as_json=args.json,
        columns=["seq", "entry_id", "at", "trust", "priority", "kind", "result"],
        empty="no entries",
    )
    return exits.OK


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action", choices=["import", "show"], help="import the seeds' SQLite blackboard; show a session's entries"
    )
    p.add_argument("--owner", help="the owner (import: default NOVA_AUDIO_AGENT_BLACKBOARD_OWNER_ID)")
    p.add_argument(
        "--path",
        help="import: the SQLite file (default NOVA_AUDIO_AGENT_BLACKBOARD_PATH, "
        "~/.nova-audio-agent/blackboard.sqlite)",
    )
    p.add_argument("--session", help="show: the session")
