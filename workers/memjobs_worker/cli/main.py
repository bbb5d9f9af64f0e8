"""``memjobs``: the command line of producers, readers and operators.

Every command reads the settings once, here, and passes them down. Errors are
one line on stderr and a named exit code (:mod:`memjobs_worker.cli.exits`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from memjobs_client.errors import (
    BackendUnavailable,
    ConfigurationError,
    MemjobsError,
    PermanentError,
)
from memjobs_worker.cli import api_command, commands, drain, exits, knowledge_commands, session_commands
from memjobs_worker.cli.output import error
from memjobs_worker.settings import load_settings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memjobs", description="Background jobs for a voice assistant's memory."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, handler: Callable[..., int], help_text: str,
            listing: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        if listing:
            p.add_argument("--json", action="store_true", help="print one JSON document")
        return p

    add("config", commands.config, "print the effective settings, secrets redacted", listing=True)

    p = add("up", commands.up, "run the embedded stack in the foreground (Redis, PostgreSQL, "
            "workers, sweeper)")
    p.add_argument("--processes", type=int, default=None)
    p.add_argument("--threads", type=int, default=None)

    p = add("worker", commands.worker, "run worker processes against the configured Redis")
    p.add_argument("--processes", type=int, default=None)
    p.add_argument("--threads", type=int, default=None)

    p = add("remember", commands.remember, "queue a source for an owner", listing=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--text", required=True)
    p.add_argument("--session", default=None)
    p.add_argument("--kind", choices=["utterance", "explicit"], default="utterance")

    p = add("forget", commands.forget, "forget a source at once and queue the deletion of its "
            "memories (not_found, exit 6, for a source the owner does not have)", listing=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--source", required=True)

    p = add("sources", commands.sources, "list an owner's sources", listing=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--show-text", action="store_true")

    p = add("memories", commands.memories, "list an owner's learned memories", listing=True)
    p.add_argument("--owner", required=True)

    p = add("recall", commands.recall, "search an owner's learned memories", listing=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--query", required=True)
    p.add_argument("--limit", type=int, default=5)

    add("status", commands.status, "queues, pending sources, live workers, recent throughput",
        listing=True)
    add("check", commands.check, "health check: exit 0 when workers are alive and Redis and the "
        "state store answer, 1 otherwise with one line saying why")

    p = add("drain", drain.drain, "wait until every queue is empty and nothing is pending; "
            "on timeout, say what is left", listing=True)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds (default 120)")

    p = add("sweep", commands.sweep, "re-enqueue extraction for sources pending too long",
            listing=True)
    p.add_argument("--every", type=float, default=None, metavar="SECONDS",
                   help="sweep again every SECONDS until SIGTERM/SIGINT (a sweeper service)")

    session_commands.add_parsers(add)
    knowledge_commands.add_parsers(add)
    api_command.add_parsers(add)

    add("demo", commands.demo, "a scripted scenario on the embedded stack")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
        code: int = args.handler(settings, args)
        return code
    except ConfigurationError as exc:
        error(str(exc))
        return exits.CONFIG
    except BackendUnavailable as exc:
        error(str(exc))
        return exits.UNAVAILABLE
    except PermanentError as exc:
        error(f"refused ({exc.reason}): {exc}")
        return exits.REFUSED
    except MemjobsError as exc:
        error(str(exc))
        return exits.FAILED
    except KeyboardInterrupt:
        error("interrupted: stopped before it finished")
        return exits.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
