"""An owner's whole data: ``memjobs erase``, ``memjobs export``, ``memjobs import``
(docs/data-lifecycle.md).

The lifecycle package (every store's part, the broker's message access) is
imported by the handlers only: ``memjobs erase --help`` stays light."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from memjobs_client.errors import InvalidPayload
from memjobs_worker.cli import exits
from memjobs_worker.cli.door import runtime_for
from memjobs_worker.cli.output import emit, say
from memjobs_worker.settings import Settings

if TYPE_CHECKING:
    from memjobs_worker.lifecycle import Owner


def _owner(value: str) -> Owner:
    from memjobs_worker.lifecycle import Owner

    try:
        return Owner.of(value)
    except ValueError:
        raise InvalidPayload("--owner must not be empty") from None


def erase(settings: Settings, args: argparse.Namespace) -> int:
    """Erase the owner from every store; only the counts stay (``owner_erasures``)."""
    from memjobs_worker.lifecycle import erase_owner, owner_parts

    owner = _owner(args.owner)
    with runtime_for(settings) as rt:
        report = erase_owner(
            owner, owner_parts(rt), redis_client=rt.redis, db=rt.db, hold_ms=settings.lifecycle.erase_hold_ms
        )
    if args.json:
        emit(report.as_dict(), as_json=True)
    else:
        say(
            f"erased: {report.total} records ({_per_kind(report.counts)}); "
            f"the owner's jobs are dropped for {settings.lifecycle.erase_hold_ms // 1000} s more"
        )
    return exits.OK


def _per_kind(counts: Mapping[str, int]) -> str:
    """``sources 3, memories 2``: a report's counts, by kind of record."""
    return ", ".join(f"{name} {n}" for name, n in counts.items())


def export(settings: Settings, args: argparse.Namespace) -> int:
    """Write the owner's export (JSON Lines) to ``-o FILE`` (owner-only, written
    whole or not at all) or to standard output."""
    from memjobs_worker.lifecycle import export_lines, owner_parts

    owner = _owner(args.owner)
    with runtime_for(settings) as rt:
        lines = export_lines(owner, owner_parts(rt))
        if args.output in (None, "-"):
            sys.stdout.writelines(lines)
            sys.stdout.flush()
            return exits.OK
        count = _write_private(Path(args.output), lines)
    say(f"exported {count} records to {args.output}", err=True)
    return exits.OK


def _write_private(path: Path, lines: Iterator[str]) -> int:
    """Write ``lines`` to ``path`` mode 0600, through a temporary file renamed at the end."""
    fd, temporary = tempfile.mkstemp(prefix=".memjobs-export-", dir=path.parent or Path("."))
    count = -1  # the header is not a record
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            for line in lines:
                out.write(line)
                count += 1
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return count


def import_(settings: Settings, args: argparse.Namespace) -> int:
    """Restore an export into this stack, for its owner or ``--owner``."""
    from memjobs_worker.lifecycle import import_owner, owner_parts

    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidPayload(f"cannot read {args.file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InvalidPayload(f"{args.file} is not UTF-8 text") from None
    with runtime_for(settings) as rt:
        report = import_owner(text.splitlines(), owner_parts(rt), owner_id=args.owner)
    if args.json:
        emit(report.as_dict(), as_json=True)
    else:
        say(
            f"imported: {sum(report.read.values())} records read, "
            f"{sum(report.changed.values())} changed "
            f"({_per_kind(report.changed) or 'nothing new'})"
        )
        for note in report.notes:
            say(f"  {note}")
    return exits.OK


# --- options ----------------------------------------------------------------------


def erase_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--owner", required=True, help="the owner id to erase everywhere")


def export_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--owner", required=True, help="the owner id whose data to export")
    p.add_argument("-o", "--output", help="the file to write (default: standard output)")


def import_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="an export (memjobs export), or - for standard input")
    p.add_argument("--owner", help="import as this owner (default: the export's own)")
