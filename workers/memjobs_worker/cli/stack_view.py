"""The running stack as the commands run against its data directory see it:
one truth about its switches.

``memjobs up`` records its effective switches in the state file
(:func:`memjobs_worker.endpoints.stack_settings`: values, and for secrets only
whether they are set). A command run against that data directory from another
shell follows them — knowledge on or off, the model and embedder, the API's
address — instead of its own environment's, and says so on stderr when its
shell set one to something else. ``memjobs config`` shows where each value
came from: ``stack``, ``environment`` or ``default``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from memjobs_worker.embedded.stack import StackInfo, read_stack
from memjobs_worker.settings import Settings

STACK = "stack"
ENVIRONMENT = "environment"
DEFAULT = "default"


@dataclass
class StackView:
    """The settings a command runs with, and where each came from.

    ``stack``: the running stack (None: none runs here); ``notices``: one line
    per switch the shell set otherwise than the stack runs with."""

    settings: Settings
    stack: StackInfo | None
    origins: dict[str, str]
    notices: list[str] = field(default_factory=list)
    secrets_set: dict[str, bool] = field(default_factory=dict)


def _port(url: str | None) -> int | None:
    try:
        return urlsplit(url).port if url else None
    except ValueError:
        return None


def follow_stack(settings: Settings) -> StackView:
    """``settings`` with the running stack's switches in place of the shell's."""
    mine = {entry.key: entry for entry in settings.entries()}
    origins = {key: ENVIRONMENT if entry.from_env else DEFAULT for key, entry in mine.items()}
    stack = read_stack(settings.data_dir)
    if stack is None:
        return StackView(settings, None, origins)
    shared: dict[str, Any] = dict(stack.settings or {})
    update: dict[str, dict[str, Any]] = {}
    for key, port_of in (("api.port", stack.api_url), ("metrics.port", stack.metrics_url)):
        port = _port(port_of)
        if port is not None:
            shared[key] = {"value": port}
    secrets: dict[str, bool] = {}
    notices = []
    for key, entry in shared.items():
        if key not in mine or key == "data_dir" or not isinstance(entry, dict):
            continue  # a switch this version does not know
        if "set" in entry:  # a secret: only whether the stack has one
            secrets[key] = bool(entry["set"])
            origins[key] = STACK
            continue
        value, own = entry.get("value"), mine[key]
        if value != own.value and own.from_env and key not in ("api.port", "metrics.port"):
            notices.append(
                f"{own.env} is {_said(own.value)} in this shell but {_said(value)} in "
                f"the stack running in {settings.data_dir} (pid {stack.pid}): "
                f"following the stack"
            )
        _set(update, key, value)
        origins[key] = STACK
    for key, url in (("redis.url", stack.redis_url), ("database.url", stack.database_url)):
        if mine[key].value is None:
            origins[key] = STACK  # where the commands connect (memjobs_worker.endpoints)
            _set(update, key, url)
    try:
        followed = settings.updated(**update)
    except ValueError:  # pragma: no cover - the stack's values passed the same validation
        followed = settings
    return StackView(followed, stack, origins, notices, secrets)


def _set(update: dict[str, dict[str, Any]], key: str, value: Any) -> None:
    section, _, field = key.partition(".")
    update.setdefault(section, {})[field] = value


def _said(value: Any) -> str:
    return "unset" if value is None else str(value)
