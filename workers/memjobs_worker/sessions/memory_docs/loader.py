"""Choose the memory provider from one setting, at the entry point.

``None`` or ``"markdown"``: Markdown files under ``data_dir/memory`` (one host).
``"sql"``: the ``memory_documents`` table (several hosts share it).
Anything else: ``"package.module:factory"``, a host's own provider. The factory
is called with ``data_dir=`` if it accepts that keyword, else with no
arguments; it must return an object with the provider's methods
(``describe``, ``list``, ``apply``, ``health``, ``close``: a subclass of
:class:`MemoryProvider` or not) whose ``describe()`` reports
``{protocolVersion: PROTOCOL_VERSION, key, label}``. Every mistake is a ``ConfigurationError``
raised at start-up, naming what to change.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import cast

from sqlalchemy.engine import Engine

from memjobs_client.errors import ConfigurationError
from memjobs_worker.sessions.memory_docs.files import MarkdownFileProvider
from memjobs_worker.sessions.memory_docs.protocol import (
    PROTOCOL_VERSION,
    MemoryProvider,
    ProviderInfo,
    missing_methods,
)
from memjobs_worker.sessions.memory_docs.sql import SqlMemoryProvider

_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def load_provider(
    spec: str | None, *, data_dir: Path, engine_factory: Callable[[], Engine] | None = None
) -> MemoryProvider:
    """The provider named by ``spec``, checked against the protocol version.

    Parameters:
        spec: ``None``/``"markdown"``, ``"sql"`` or ``"package.module:factory"``.
        data_dir: memjobs' data directory (files go to ``data_dir/memory``).
        engine_factory: returns the state database's engine; needed for ``"sql"``.
            The engine stays the caller's: closing the provider does not dispose it.

    Raises:
        ConfigurationError: unknown spec, import failure, not a provider, or a
            protocol version other than :data:`PROTOCOL_VERSION`.
    """
    name = (spec or "markdown").strip()
    if name.lower() == "markdown":
        return MarkdownFileProvider(Path(data_dir) / "memory")
    if name.lower() == "sql":
        if engine_factory is None:
            raise ConfigurationError("the sql memory provider needs the state database's engine")
        return SqlMemoryProvider(engine_factory())
    return check_provider(_from_import_path(name, Path(data_dir)), name)


def check_provider(provider: object, name: str = "injected") -> MemoryProvider:
    """``provider`` if it has the provider's methods and speaks :data:`PROTOCOL_VERSION`.

    Raises:
        ConfigurationError: a method is missing, ``describe()`` fails or answers
            another protocol version (the provider is closed then).
    """
    missing = missing_methods(provider)
    if missing:
        raise ConfigurationError(
            f"memory provider {name!r} ({type(provider).__name__}) lacks {', '.join(missing)}(): "
            "a memory provider has describe, list, apply, health and close"
        )
    checked = cast(MemoryProvider, provider)
    try:
        info = ProviderInfo.coerce(checked.describe())
    except Exception as exc:
        _close(checked)
        raise ConfigurationError(f"memory provider {name!r}: describe() failed: {exc!r}") from exc
    if info is None or info.protocol_version != PROTOCOL_VERSION:
        _close(checked)
        found = info.protocol_version if info is not None else "unknown"
        raise ConfigurationError(
            f"memory provider {name!r} implements protocol version {found}; memjobs needs "
            f"version {PROTOCOL_VERSION} (describe() -> {{protocolVersion, key, label}})"
        )
    return checked


def _close(provider: MemoryProvider) -> None:
    try:
        result = provider.close()
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if callable(close):
                close()
    except Exception:  # noqa: S110 - a provider that fails to close is dropped all the same
        pass


def _from_import_path(spec: str, data_dir: Path) -> object:
    if _IMPORT_PATH.fullmatch(spec) is None:
        raise ConfigurationError(f"unknown memory provider {spec!r}: use 'markdown', 'sql' or 'package.module:factory'")
    module_name, _, attr_path = spec.partition(":")
    try:
        target: object = importlib.import_module(module_name)
        for attr in attr_path.split("."):
            target = getattr(target, attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"memory provider {spec!r} cannot be imported: {exc}") from exc
    if not callable(target):
        raise ConfigurationError(f"memory provider {spec!r} is not callable")
    try:
        provider = target(data_dir=data_dir) if _accepts_data_dir(target) else target()
    except Exception as exc:
        raise ConfigurationError(f"memory provider {spec!r} failed to start: {exc!r}") from exc
    return provider


def _accepts_data_dir(factory: Callable[..., object]) -> bool:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind is inspect.Parameter.VAR_KEYWORD
        or (p.name == "data_dir" and p.kind is not inspect.Parameter.POSITIONAL_ONLY)
        for p in params
    )
