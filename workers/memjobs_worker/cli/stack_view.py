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
from memjobs_worker.settings import Settings, env_name

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
    origins = {
        name: ENVIRONMENT if name in settings.model_fields_set else DEFAULT for name in type(settings).model_fields
    }
    stack = read_stack(settings.data_dir)
    if stack is None:
        return StackView(settings, None, origins)
    shared: dict[str, Any] = dict(stack.settings or {})
    update: dict[str, Any] = {}
    for name, port_of in (("api_port", stack.api_url), ("metrics_port", stack.metrics_url)):
        port = _port(port_of)
        if port is not None:
            shared[name] = {"value": port}
    secrets: dict[str, bool] = {}
    notices = []
    for name, entry in shared.items():
        if name not in origins or not isinstance(entry, dict):
            continue  # a switch this version does not know
        if "set" in entry:  # a secret: only whether the stack has one
            secrets[name] = bool(entry["set"])
            origins[name] = STACK
            continue
        value, mine = entry.get("value"), getattr(settings, name)
        if value != mine and name in settings.model_fields_set and name not in ("api_port", "metrics_port"):
            notices.append(
                f"{env_name(name)} is {_said(mine)} in this shell but {_said(value)} in "
                f"the stack running in {settings.data_dir} (pid {stack.pid}): "
                f"following the stack"
            )
        update[name] = value
        origins[name] = STACK
    for name, url in (("redis_url", stack.redis_url), ("database_url", stack.database_url)):
        if getattr(settings, name) is None:
            origins[name] = STACK  # where the commands connect (memjobs_worker.endpoints)
            update[name] = url
    try:
        followed = settings.model_copy(update=update)
    except ValueError:  # pragma: no cover - the stack's values passed the same validation
        followed = settings
    return StackView(followed, stack, origins, notices, secrets)


def _said(value: Any) -> str:
    return "unset" if value is None else str(value)
