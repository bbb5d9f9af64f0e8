"""``memjobs queue pause | resume | list``: stop and restart the consumption of
a queue on every worker host (the console's Pause and Resume).

A paused queue's messages stay queued, none retried or dead-lettered; every
worker stops taking them within a second (:mod:`memjobs_worker.ops.pauses`)
and a job already running finishes. Only Redis is needed.
"""

from __future__ import annotations

import argparse
import time

from memjobs_client.contracts import QUEUES
from memjobs_worker.cli import exits
from memjobs_worker.cli.output import emit
from memjobs_worker.endpoints import connect_redis, resolve_endpoints
from memjobs_worker.ops.pauses import QueuePauses
from memjobs_worker.settings import Settings


def options(p: argparse.ArgumentParser) -> None:
    """``queue``'s actions."""
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, what in (
        ("pause", "stop every worker host taking this queue's jobs (they stay queued)"),
        ("resume", "let the workers take this queue's jobs again"),
    ):
        action = actions.add_parser(name, help=what)
        action.add_argument("queue", choices=QUEUES, help="the queue")
        action.add_argument("--json", action="store_true", help="print one JSON document")
    listing = actions.add_parser("list", help="the paused queues and for how long")
    listing.add_argument("--json", action="store_true", help="print one JSON document")


def queue(settings: Settings, args: argparse.Namespace) -> int:
    client = connect_redis(
        resolve_endpoints(settings.data_dir, settings.redis, settings.database).redis_url, settings.redis
    )
    try:
        pauses = QueuePauses(client)
        if args.action == "list":
            now_ms = time.time() * 1000
            rows = [
                {"queue": q, "paused_for_s": round((now_ms - at) / 1000, 1)}
                for q, at in sorted(pauses.paused().items())
            ]
            emit(rows, as_json=args.json, columns=("queue", "paused_for_s"), empty="no queue is paused")
            return exits.OK
        changed = pauses.pause(args.queue) if args.action == "pause" else pauses.resume(args.queue)
        done = {"pause": "paused", "resume": "resumed"}[args.action]
        emit({"queue": args.queue, done: changed}, as_json=args.json)
        return exits.OK
    finally:
        client.close()
