"""Names a package exports but imports only when first read (PEP 562), so that
``import memjobs_worker`` (or one of its packages) loads no more than it must."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, homes: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name of ``homes`` is imported
    from the module it names when first read, then kept in ``namespace`` (the
    package's ``globals()``), so the next read is an ordinary one.

    Usage: ``__getattr__ = lazy_exports(__name__, {"Name": "package.module"}, globals())``.
    """

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(homes[name]), name)
        namespace[name] = value
        return value

    return __getattr__
