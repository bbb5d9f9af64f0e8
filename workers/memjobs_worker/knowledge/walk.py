"""Listing the files of a document folder, within budgets, saying what was skipped.

What: :func:`walk_folder` lists the entries under a folder, depth first in name
order, for a reindex; what it does not list it reports, by a name relative to
the folder (never an absolute path) and a reason.

Why this shape: a folder is hostile input. The walk is iterative (an explicit
stack), so a folder thousands of levels deep cannot exhaust Python's
recursion; a depth budget prunes it long before, and a file budget bounds the
listing. Symlinked directories are not followed (a link loop cannot trap the
walk; a link out of the folder is not walked); a symlink to a file, a FIFO or a
device *is* listed, so the worker refuses it by name with its reason
(``symlink_loop``, ``broken_link``, ``path_not_allowed``, ``not_a_file``), one
document at a time. A directory that cannot be read is skipped, never fatal.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from memjobs_worker.knowledge.files import public_name

#: Default budgets: folder levels below the named folder, and files listed.
MAX_DEPTH = 32
MAX_FILES = 20_000
#: At most this many skipped entries are named; the rest are counted.
MAX_NAMED_SKIPS = 50


@dataclass
class Listing:
    """The files found, and what was skipped: named (up to a limit) and counted by reason."""

    files: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    skipped_counts: Counter[str] = field(default_factory=Counter)

    def skip(self, relative: str, reason: str) -> None:
        self.skipped_counts[reason] += 1
        if len(self.skipped) < MAX_NAMED_SKIPS:
            self.skipped.append({"name": relative, "reason": reason})


def walk_folder(
    folder: str, *, max_depth: int = MAX_DEPTH, max_files: int = MAX_FILES, listing: Listing | None = None
) -> Listing:
    """The entries under ``folder`` to index, and what was skipped.

    Skip reasons: ``too_deep`` (a directory below ``max_depth``),
    ``symlinked_directory``, ``unreadable_directory``, ``file_budget`` (the
    walk stopped: ``max_files`` reached; named once, at the first entry left).
    """
    found = listing if listing is not None else Listing()
    stack: list[tuple[str, str, int]] = [(folder, "", 0)]
    while stack:
        path, relative, depth = stack.pop()
        try:
            with os.scandir(path) as entries:
                names = sorted(entries, key=lambda e: os.fsencode(e.name))
        except OSError:
            found.skip(relative or ".", "unreadable_directory")
            continue
        subdirs: list[tuple[str, str, int]] = []
        for entry in names:
            shown = f"{relative}/{public_name(entry.name)}" if relative else public_name(entry.name)
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_link = entry.is_symlink()
            except OSError:
                found.skip(shown, "unreadable_directory")
                continue
            if is_dir:
                if depth + 1 > max_depth:
                    found.skip(shown, "too_deep")
                else:
                    subdirs.append((entry.path, shown, depth + 1))
                continue
            if is_link and _points_to_directory(entry.path):
                found.skip(shown, "symlinked_directory")
                continue
            if len(found.files) >= max_files:
                found.skip(shown, "file_budget")
                return found
            found.files.append(entry.path)
        stack.extend(reversed(subdirs))  # name order, depth first
    return found


def _points_to_directory(path: str) -> bool:
    try:
        return os.path.isdir(path)
    except (OSError, ValueError):
        return False
