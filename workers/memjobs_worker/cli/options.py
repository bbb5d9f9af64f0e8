"""Options several commands share: ``--owner``, ``--limit``, and their checks."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, TypeVar

from memjobs_worker.cli.output import say

T = TypeVar("T")
DEFAULT_LIMIT = 100


def positive(value: str) -> int:
    """An option's value that must be a whole number of at least 1."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def owner_option(p: argparse.ArgumentParser, *, required: bool = True, what: str = "") -> None:
    p.add_argument("--owner", required=required, help="the owner (user) id" + what)


def limit_option(p: argparse.ArgumentParser, default: int | None = DEFAULT_LIMIT, *, what: str = "") -> None:
    """``--limit``: the first N of a listing, in its order (a line on stderr says
    how many more there were)."""
    shown = f"default {default}" if default is not None else "default: all"
    p.add_argument(
        "--limit",
        type=positive,
        default=default,
        help=f"at most this many{what} ({shown}); a line on stderr says how many were left out",
    )


def limited(rows: Sequence[T], args: Any, what: str, *, more: bool = False) -> list[T]:
    """``rows`` cut to ``--limit``, saying on stderr what was left out (stdout
    stays one document with ``--json``); ``more``: ``rows`` is itself the first
    part of a longer listing (an API's page)."""
    limit = getattr(args, "limit", None)
    if limit is None or (len(rows) <= limit and not more):
        return list(rows)
    if more:
        say(
            f"memjobs: showing the first {min(limit, len(rows))} {what}; there are more (--limit N shows more)",
            err=True,
        )
    else:
        say(f"memjobs: showing {limit} of {len(rows)} {what}; --limit N shows more", err=True)
    return list(rows[:limit])
