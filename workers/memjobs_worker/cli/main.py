"""``memjobs``: the command line of producers, readers and operators.

A command starts in a blink because it imports only what it runs: the table
:data:`COMMANDS` names each subcommand's handler and option builder as
``"module:function"`` under :mod:`memjobs_worker.cli`, and only the named
command's module is imported (``memjobs --help`` imports none of them).
Registering a subcommand is one entry in that table.

Every command reads the settings once, here, and passes them down. Errors are
one line on stderr and a named exit code (:mod:`memjobs_worker.cli.exits`). A
bare ``memjobs`` prints the help; a reader that closes the pipe early
(``memjobs status | head -1``) ends the command quietly, here, once.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from memjobs_worker.cli import exits


@dataclass(frozen=True)
class Command:
    """One subcommand.

    Parameters:
        name: the word after ``memjobs``.
        handler: ``"module:function"`` taking ``(settings, args)`` and returning an exit code.
        help: one line, for ``memjobs --help`` and the command's own ``--help``.
        options: ``"module:function"`` adding the command's options to its parser, or None.
        listing: the command prints a document: it gets ``--json``.
        own_settings: the command starts servers or workers of its own (``up``,
            ``worker``, ``api``…) and runs with its shell's settings; every other
            command follows the switches of the stack running in its data
            directory (:mod:`memjobs_worker.cli.stack_view`).
    """

    name: str
    handler: str
    help: str
    options: str | None = None
    listing: bool = False
    own_settings: bool = False


COMMANDS: tuple[Command, ...] = (
    Command("config", "commands:config", "print the effective settings, secrets redacted", listing=True),
    Command(
        "up",
        "stack_commands:up",
        "run the embedded stack in the foreground (Redis, PostgreSQL, workers, sweeper, HTTP API)",
        "stack_commands:pool_options",
        own_settings=True,
    ),
    Command(
        "down",
        "stack_commands:down",
        "stop the data directory's stack (or what a dead "
        "`memjobs up` left running) and wait until every process is gone",
        "stack_commands:down_options",
        own_settings=True,
    ),
    Command(
        "worker",
        "stack_commands:worker",
        "run worker processes against the configured Redis",
        "stack_commands:pool_options",
        own_settings=True,
    ),
    Command(
        "remember",
        "producer_commands:remember",
        "queue a source for an owner",
        "producer_commands:remember_options",
        listing=True,
    ),
    Command(
        "forget",
        "producer_commands:forget",
        "forget a source at once and queue the deletion "
        "of its memories (not_found, exit 6, for a source the owner does not have)",
        "producer_commands:forget_options",
        listing=True,
    ),
    Command(
        "end-session",
        "producer_commands:end_session",
        "queue consolidation, digest and extraction for a session",
        "producer_commands:end_session_options",
        listing=True,
    ),
    Command(
        "task",
        "producer_commands:task",
        "report a task's status to the task ledger",
        "producer_commands:task_options",
        listing=True,
    ),
    Command("sources", "commands:sources", "list an owner's sources", "commands:sources_options", listing=True),
    Command(
        "memories", "commands:memories", "list an owner's learned memories", "commands:listing_options", listing=True
    ),
    Command("recall", "commands:recall", "search an owner's learned memories", "commands:recall_options", listing=True),
    Command(
        "status",
        "commands:status",
        "queues, pending sources, live workers, recent throughput; processes a dead `memjobs up` left",
        listing=True,
    ),
    Command(
        "url",
        "stack_commands:url",
        "print the running stack's HTTP API URL (or --metrics: its metrics URL), for scripts: API=$(memjobs url)",
        "stack_commands:url_options",
    ),
    Command(
        "check",
        "commands:check",
        "health check: exit 0 when workers are alive and Redis "
        "and the state store answer, 1 otherwise with one line saying why",
    ),
    Command(
        "dead",
        "dead_commands:dead",
        "dead letters: list (no text), show one (redacted unless "
        "--reveal), retry one / a queue / all, purge one / older than / all",
        "dead_commands:options",
    ),
    Command("queue", "queue_commands:queue", "pause or resume a queue on every host", "queue_commands:options"),
    Command(
        "drain",
        "drain:drain",
        "wait until every queue is empty and nothing is pending; on timeout, say what is left",
        "drain:options",
        listing=True,
    ),
    Command(
        "sweep",
        "commands:sweep",
        "re-enqueue extraction for sources pending too long",
        "commands:sweep_options",
        listing=True,
    ),
    Command(
        "memory",
        "session_commands:memory",
        "read or change USER.md / MEMORY.md through the memory service",
        "session_commands:memory_options",
        listing=True,
    ),
    Command(
        "audit",
        "audit_command:audit",
        "the memory audit trail of every host: each patch to USER.md / MEMORY.md, applied or why not, never its text",
        "audit_command:options",
        listing=True,
    ),
    Command(
        "blackboard",
        "blackboard_command:blackboard",
        "sessions' L0 blackboards: import the "
        "seeds' SQLite blackboard (idempotent), show a session's entries in event order",
        "blackboard_command:options",
        listing=True,
    ),
    Command(
        "sessions",
        "session_commands:sessions",
        "recall an owner's session digests, task status read live",
        "session_commands:sessions_options",
        listing=True,
    ),
    Command(
        "reindex",
        "knowledge_commands:reindex",
        "queue a re-index of an owner's documents (needs --consent)",
        "knowledge_commands:reindex_options",
        listing=True,
    ),
    Command(
        "knowledge",
        "knowledge_commands:knowledge",
        "search or list an owner's knowledge; rebuild the full-text index",
        "knowledge_commands:knowledge_options",
        listing=True,
    ),
    Command(
        "reembed",
        "reembed_command:reembed",
        "re-embed stored memories and knowledge chunks "
        "after a change of embedder (resumable; --check says what is left)",
        "reembed_command:options",
        listing=True,
    ),
    Command(
        "mcp",
        "mcp_command:mcp",
        "serve knowledge recall (or, with --memory, personal memory) to a "
        "model client over MCP on stdio, for one owner (docs/mcp.md)",
        "mcp_command:options",
    ),
    Command(
        "api",
        "api_command:api",
        "serve the HTTP API (MEMJOBS_API_HOST:MEMJOBS_API_PORT) against the configured or running stack",
        "api_command:options",
        own_settings=True,
    ),
    Command(
        "token",
        "token_command:token",
        "issue a scoped, expiring token for the HTTP API (owners, scopes; docs/security.md)",
        "token_command:options",
        own_settings=True,
    ),
    Command(
        "backup",
        "backup_commands:backup",
        "write the running embedded stack to one archive "
        "(PostgreSQL dump, Redis snapshot, memory files, settings without secrets)",
        "backup_commands:backup_options",
        listing=True,
    ),
    Command(
        "restore",
        "backup_commands:restore",
        "restore a `memjobs backup` archive into a new or empty data directory",
        "backup_commands:restore_options",
        listing=True,
        own_settings=True,
    ),
    Command(
        "import-gateway",
        "backup_commands:import_gateway",
        "import a single-host gateway's USER.md / MEMORY.md folders (and, with --consent, its knowledge folder)",
        "backup_commands:import_gateway_options",
        listing=True,
    ),
    Command(
        "erase",
        "lifecycle_commands:erase",
        "erase an owner from every store (sources, "
        "memories, documents, digests, tasks, knowledge, audit, jobs, Redis keys); only counts "
        "stay",
        "lifecycle_commands:erase_options",
        listing=True,
    ),
    Command(
        "export",
        "lifecycle_commands:export",
        "write everything memjobs holds about an owner as JSON Lines (docs/data-lifecycle.md)",
        "lifecycle_commands:export_options",
    ),
    Command(
        "import",
        "lifecycle_commands:import_",
        "restore an owner's export into this stack (idempotent)",
        "lifecycle_commands:import_options",
        listing=True,
    ),
    Command("demo", "commands:demo", "a scripted scenario on the embedded stack", own_settings=True),
)


def resolve(target: str) -> Callable[..., Any]:
    """``"module:function"`` under :mod:`memjobs_worker.cli`, imported now."""
    module, _, function = target.partition(":")
    found: Callable[..., Any] = getattr(import_module(f"memjobs_worker.cli.{module}"), function)
    return found


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (the top level's options take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def version() -> str:
    """The installed distribution's version (``memjobs --version``)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("memjobs")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class _Version(argparse.Action):
    """``--version``: the version is looked up only when asked for."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str = argparse.SUPPRESS,
        default: str = argparse.SUPPRESS,
        help: str | None = None,
    ) -> None:  # noqa: A002
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"memjobs {version()}")
        parser.exit()


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given ``argv``, only the command it names gets its options
    (and its module imported); given none, every command does."""
    chosen = _chosen(argv) if argv is not None else None
    parser = argparse.ArgumentParser(prog="memjobs", description="Background jobs for a voice assistant's memory.")
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        p.set_defaults(handler=command.handler, own_settings=command.own_settings)
        if argv is not None and command.name != chosen:
            continue
        if command.listing:
            p.add_argument("--json", action="store_true", help="print one JSON document")
        if command.options is not None:
            resolve(command.options)(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            parser = build_parser(words)
            args = parser.parse_args(words)
            if args.command is None:  # a bare `memjobs`: the help, not an error
                parser.print_help()
                return exits.OK
            return run(resolve(args.handler), args)
        finally:  # --help exits through SystemExit: flushed here too
            sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
    except BrokenPipeError:
        # The reader left (`memjobs status | head -1`): what it did not read is not
        # an error worth a traceback. stdout goes to /dev/null so that the
        # interpreter's own flush at exit does not complain again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exits.CLOSED_PIPE


def run(handler: Callable[..., int], args: argparse.Namespace) -> int:
    """Run ``handler`` with the settings; a memjobs error is one line and an exit code."""
    from memjobs_client.errors import BackendUnavailable, ConfigurationError, MemjobsError, PermanentError
    from memjobs_worker.cli.output import error, for_people
    from memjobs_worker.cli.stack_view import follow_stack
    from memjobs_worker.settings import load_settings

    try:
        settings = load_settings()
        if not getattr(args, "own_settings", True):
            args.stack_view = view = follow_stack(settings)
            settings = view.settings
            for notice in view.notices:
                error(notice)
        code: int = handler(settings, args)
        return code
    except ConfigurationError as exc:
        error(str(exc))
        return exits.CONFIG
    except BackendUnavailable as exc:
        error(str(exc))
        return exits.UNAVAILABLE
    except PermanentError as exc:
        error(f"refused ({exc.reason}): {for_people(str(exc))}")
        return exits.REFUSED
    except MemjobsError as exc:
        error(str(exc))
        return exits.FAILED
    except KeyboardInterrupt:
        error("interrupted: stopped before it finished")
        return exits.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
