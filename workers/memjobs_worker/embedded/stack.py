"""The state file through which other commands find what ``memjobs up`` started."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class StackInfo:
    """Where the running embedded stack listens, and who runs it."""

    pid: int
    redis_url: str
    database_url: str
    started_at: float
    #: The HTTP API's URL (``memjobs up`` serves it beside the workers), once it listens.
    api_url: str | None = None


def stack_file(data_dir: Path) -> Path:
    return data_dir / "run" / "stack.json"


def write_stack(data_dir: Path, info: StackInfo) -> None:
    """Write the state file atomically (rename over the old one)."""
    path = stack_file(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(info)))
    os.replace(tmp, path)


def read_stack(data_dir: Path) -> StackInfo | None:
    """The running stack, or None when there is no file or its process is gone."""
    try:
        info = StackInfo(**json.loads(stack_file(data_dir).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    try:
        os.kill(info.pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return info


def record_api_url(data_dir: Path, url: str) -> None:
    """Add the API's URL to the running stack's state file."""
    info = read_stack(data_dir)
    if info is not None:
        write_stack(data_dir, replace(info, api_url=url))


def remove_stack(data_dir: Path) -> None:
    stack_file(data_dir).unlink(missing_ok=True)
