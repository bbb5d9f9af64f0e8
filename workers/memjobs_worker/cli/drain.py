"""``memjobs drain``: wait until every queue is empty and nothing is pending,
saying what is left.

Progress goes to stderr (:mod:`memjobs_worker.cli.progress`): what is left
(jobs in the queues and pending sources), the rate and the time left, per queue
and with how many jobs are retrying — on a terminal one line rewritten in
place, in a pipe a line every ``--every`` seconds, with ``--json`` JSON lines.
On success it prints how long it took; on timeout or Ctrl-C it says what is
left — each non-empty queue, the pending sources, every retrying job with its
last failure — and exits 1 (timeout) or 130 (interrupted).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from memjobs_client.contracts import QUEUE_KNOWLEDGE
from memjobs_worker.cli import exits
from memjobs_worker.cli.door import runtime_for
from memjobs_worker.cli.output import emit, error
from memjobs_worker.cli.progress import Progress
from memjobs_worker.observability.retrying import RetryingRecord, stale_after_ms
from memjobs_worker.ops import status as ops
from memjobs_worker.runtime import Runtime
from memjobs_worker.settings import Settings

POLL_S = 0.1


def left(rt: Runtime, *, with_retrying: bool = True) -> dict[str, Any]:
    """What is not done: busy queues, pending sources, retrying jobs (the newest
    of the workers' record, :mod:`memjobs_worker.observability.retrying`; read
    only when shown)."""
    queues = {
        name: {k: v for k, v in q.items() if k != "dead" and v}
        for name, q in ops.queue_stats(rt.redis).items()
        # knowledge off: no worker consumes its queue, so waiting on it is futile
        if rt.settings.knowledge.enabled or name != QUEUE_KNOWLEDGE
    }
    return {
        "queues": {name: q for name, q in queues.items() if q},
        "pending_sources": rt.store.counts_by_state()["pending"],
        "retrying": _retrying(rt) if with_retrying else [],
    }


def _retrying(rt: Runtime) -> list[dict[str, Any]]:
    found = RetryingRecord(rt.redis).read(stale_after_ms=stale_after_ms(rt.settings.workers))
    return [job.as_dict() for job in found.newest]


def is_empty(remaining: dict[str, Any]) -> bool:
    return not remaining["queues"] and not remaining["pending_sources"]


def describe(remaining: dict[str, Any]) -> list[str]:
    """One line per thing left, for people."""
    lines = []
    for name, counts in remaining["queues"].items():
        lines.append(f"{name}: " + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items()))
    if remaining["pending_sources"]:
        lines.append(f"sources pending in the ledger: {remaining['pending_sources']}")
    for job in remaining["retrying"]:
        lines.append(
            f"retrying {job['actor']} {job['message_id']} on {job['queue']} "
            f"(attempt {job['failures'] + 1}): {job['reason']}"
        )
    if not lines:
        lines.append("nothing (it drained just now)")
    return lines


def amount(remaining: dict[str, Any]) -> int:
    """Jobs in the queues and sources pending: what drain waits for, in one number."""
    return int(sum(sum(c.values()) for c in remaining["queues"].values()) + remaining["pending_sources"])


def _detail(remaining: dict[str, Any]) -> str:
    queues = "; ".join(f"{name} {sum(c.values())}" for name, c in remaining["queues"].items())
    parts = [f"queues: {queues or 'empty'}", f"pending sources: {remaining['pending_sources']}"]
    if remaining["retrying"]:
        parts.append(f"retrying: {len(remaining['retrying'])}")
    return ", ".join(parts)


@contextmanager
def _ctrl_c() -> Iterator[threading.Event]:
    """The first Ctrl-C sets the event the loop waits on, so drain stops between two
    reads and says what is left (a KeyboardInterrupt raised inside a Redis or
    database call could leave a pool to wait on at exit); the second exits at once."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():  # signals go to the main thread
        yield stop
        return

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def drain(settings: Settings, args: argparse.Namespace) -> int:
    progress = Progress("jobs and pending sources", doing="draining", as_json=args.json, every_s=args.every)
    started = time.monotonic()
    deadline = started + args.timeout
    with runtime_for(settings) as rt, _ctrl_c() as stop:
        streak = 0
        while True:
            now = time.monotonic()
            remaining = left(rt, with_retrying=progress.due(now))
            streak = streak + 1 if is_empty(remaining) else 0
            if streak >= 2:
                break
            if stop.is_set():
                progress.clear()
                return _report(args, "drain interrupted (Ctrl-C)", left(rt), exits.INTERRUPTED)
            if now >= deadline:
                progress.clear()
                return _report(args, f"not drained after {args.timeout:g} s", left(rt), exits.FAILED)
            progress.update(amount(remaining), detail=_detail(remaining))
            stop.wait(POLL_S)
    progress.clear()
    seconds = round(time.monotonic() - started, 2)
    if args.json:
        emit({"drained": True, "seconds": seconds}, as_json=True)
    else:
        print(f"drained in {seconds:g} s")
    return exits.OK


def _report(args: argparse.Namespace, headline: str, remaining: dict[str, Any], code: int) -> int:
    if args.json:
        emit({"drained": False, "left": remaining}, as_json=True)
    error(headline + "; left:")
    for line in describe(remaining):
        print(f"  {line}", file=sys.stderr)
    return code


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="give up after this many seconds, saying what is left (default 120)",
    )
    p.add_argument(
        "--every",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="in a pipe (or with --json), a progress line this often (default 5; "
        "a terminal's line is rewritten in place)",
    )
