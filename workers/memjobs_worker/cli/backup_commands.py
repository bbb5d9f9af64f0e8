"""``memjobs backup``, ``memjobs restore`` (the embedded stack as a whole) and
``memjobs import-gateway`` (what a single-host gateway already has)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from memjobs_worker.cli import exits
from memjobs_worker.cli.output import emit, say
from memjobs_worker.settings import Settings


def backup(settings: Settings, args: argparse.Namespace) -> int:
    from memjobs_worker.ops.backup import backup as run_backup

    if args.data_dir:
        settings = settings.model_copy(update={"data_dir": Path(args.data_dir).expanduser().absolute()})
    output = Path(args.output).expanduser().absolute()
    summary = run_backup(settings, output, progress=_progress(args))
    if args.json:
        emit(summary, as_json=True)
    else:
        say(
            f"backup written to {output} ({summary['bytes']:,} bytes); restore it with "
            f"`memjobs restore {output} --data-dir NEW`"
        )
    return exits.OK


def restore(settings: Settings, args: argparse.Namespace) -> int:
    from memjobs_worker.ops.backup import restore as run_restore

    target = Path(args.data_dir).expanduser().absolute()
    summary = run_restore(settings, Path(args.archive).expanduser().absolute(), target, progress=_progress(args))
    for notice in summary["notices"]:
        say(f"memjobs: {notice}", err=True)
    if args.json:
        emit(summary, as_json=True)
    else:
        say(f"restored into {target}: start it with `MEMJOBS_DATA_DIR={target} memjobs up`")
    return exits.OK


def import_gateway(settings: Settings, args: argparse.Namespace) -> int:
    from memjobs_worker.cli.door import runtime_for
    from memjobs_worker.ops.gateway_import import GatewayImport, check_request

    memory_dir = Path(args.memory_dir).expanduser().absolute()
    knowledge_dir = Path(args.knowledge_dir).expanduser().absolute() if args.knowledge_dir else None
    check_request(settings.knowledge, memory_dir, knowledge_dir, consent=args.consent)
    with runtime_for(settings) as rt:
        run = GatewayImport(
            rt.memory_docs,
            roots=settings.knowledge.root_paths,
            knowledge=rt.knowledge if knowledge_dir else None,
            client=rt.client,
            progress=_progress(args),
        )
        summary = run.run(memory_dir, knowledge_dir)
    if args.json:
        emit(summary, as_json=True)
    else:
        totals = summary["totals"]
        say("gateway import done: " + ", ".join(f"{n} {what}" for what, n in sorted(totals.items())))
    refused = any(what.endswith("refused") for what in summary["totals"])
    return exits.REFUSED if refused else exits.OK


def _progress(args: argparse.Namespace) -> Callable[[str], None]:
    def line(text: str) -> None:
        say(text, err=bool(args.json))  # stdout stays one JSON document with --json

    return line


# --- options ----------------------------------------------------------------------


def backup_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="the running stack's data directory (default: MEMJOBS_DATA_DIR)")
    p.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the archive to write (a tar; never overwritten)"
    )


def restore_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("archive", metavar="FILE", help="an archive `memjobs backup` wrote")
    p.add_argument("--data-dir", required=True, metavar="NEW", help="a new or empty directory to restore into")


def import_gateway_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--memory-dir",
        required=True,
        metavar="DIR",
        help="the gateway's folder of one folder per user (its name: the owner id) holding USER.md and MEMORY.md",
    )
    p.add_argument(
        "--knowledge-dir",
        metavar="DIR",
        help="the gateway's knowledge folder, one folder per user; indexed only with --consent",
    )
    p.add_argument(
        "--consent", action="store_true", help="the users consented to sending their documents to the embedding service"
    )
