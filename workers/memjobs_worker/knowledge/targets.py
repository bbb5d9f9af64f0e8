"""The ``--path`` arguments of a reindex, checked like the files they contain.

What: :func:`collect` turns the paths a host names into the files to send and
the roots the worker may read under. Each named path goes through the rules a
folder's members go through in the worker: symlinks resolved, the result
under one of the host's allowed roots (``MEMJOBS_KNOWLEDGE_ROOTS``, default
the home directory), and neither the path as written nor the resolved one a
credential or system path. So ``--path /etc/passwd``, or a symlink to it in
the home directory, is refused here, before anything is queued.

Errors name a path by its last component only (never the absolute path): the
message may end up in a log that others read.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memjobs_client.errors import InvalidPayload, SensitiveContent
from memjobs_client.sensitive import find_sensitive_path
from memjobs_worker.knowledge.files import public_name
from memjobs_worker.knowledge.walk import MAX_DEPTH, MAX_FILES, Listing, walk_folder

ROOTS_HINT = "MEMJOBS_KNOWLEDGE_ROOTS (default: the home directory)"


@dataclass
class Collected:
    """The files to send, the roots they may be read under, and the walk's skips."""

    files: list[str]
    roots: list[str]
    listing: Listing


def collect(
    paths: Sequence[str], host_roots: Sequence[Path], *, max_depth: int = MAX_DEPTH, max_files: int = MAX_FILES
) -> Collected:
    """Check each named path, then list the files under each folder.

    Raises:
        SensitiveContent: a path (as written or resolved) is a credential or system path.
        InvalidPayload: a path does not exist or does not resolve (reason
            ``invalid_payload``), or resolves outside the host's roots (reason
            ``path_not_allowed``).
    """
    listing = Listing()
    roots: list[str] = []
    for raw in paths:
        real = _check(raw, host_roots)
        roots.append(str(real))
        if real.is_dir():
            walk_folder(str(real), max_depth=max_depth, max_files=max_files, listing=listing)
        else:
            listing.files.append(str(real))
    return Collected(listing.files, roots, listing)


def _check(raw: str, host_roots: Sequence[Path]) -> Path:
    name = public_name(os.path.basename(raw.rstrip("/")) or raw)
    written = os.path.abspath(os.path.expanduser(raw))
    if find_sensitive_path(written) is not None:
        raise SensitiveContent(f"--path {name}: a credential or system path is never indexed")
    try:
        real = Path(written).resolve(strict=True)
    except RuntimeError:
        raise InvalidPayload(f"--path {name}: a symlink loop") from None
    except OSError as exc:
        raise InvalidPayload(f"--path {name}: {exc.strerror or 'cannot be resolved'}") from None
    if find_sensitive_path(str(real)) is not None:
        raise SensitiveContent(f"--path {name}: it resolves to a credential or system path, which is never indexed")
    if not any(real == root or root in real.parents for root in host_roots):
        raise InvalidPayload(f"--path {name}: outside the allowed roots, {ROOTS_HINT}", reason="path_not_allowed")
    return real
