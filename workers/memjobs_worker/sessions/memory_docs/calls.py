"""The boundary with a provider: every call to it, and what its answers and
failures become. A provider may be anything with the protocol's methods
(a host's object), so nothing it does may break the service: an exception is
a ``BackendUnavailable``, an awaitable is awaited (``apply``, ``close``) or
refused (``list`` must be synchronous), and its documents are normalised."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar, cast

from memjobs_client.errors import BackendUnavailable, ConfigurationError, MemjobsError
from memjobs_worker.sessions.memory_docs.normalise import normalise_documents
from memjobs_worker.sessions.memory_docs.protocol import (
    WRITABLE_DOCS,
    Change,
    ChangeContext,
    Document,
    ListOptions,
    MemoryProvider,
    VersionConflict,
)

T = TypeVar("T")


def list_documents(provider: MemoryProvider, owner: str, cap: int) -> list[Document]:
    """The provider's snapshot, normalised; its failures as memjobs errors."""
    options = ListOptions(max_docs=len(WRITABLE_DOCS), max_chars=cap)
    try:
        raw = provider.list(owner, options)
    except MemjobsError:
        raise
    except Exception as exc:  # a host's provider must not break the service
        raise BackendUnavailable(f"memory provider failed to list: {type(exc).__name__}") from exc
    if inspect.isawaitable(raw):
        discard(raw)
        raise BackendUnavailable(
            "memory provider: list() must answer synchronously (keep a local cache in the adapter)"
        )
    return normalise_documents(raw, cap)


def apply_changes(
    provider: MemoryProvider, owner: str, changes: list[Change], context: ChangeContext
) -> dict[str, int]:
    """The provider's apply (awaited if async); the new version of each document it reports.

    Raises:
        VersionConflict: the provider raised it, or wrote fewer documents than asked.
        BackendUnavailable: the provider failed otherwise.
    """
    try:
        answer = settle(provider.apply(owner, changes, context))
    except MemjobsError:
        raise
    except Exception as exc:
        raise BackendUnavailable(f"memory provider failed to apply: {type(exc).__name__}") from exc

    def field_of(name: str) -> Any:
        return answer.get(name) if isinstance(answer, Mapping) else getattr(answer, name, None)

    changed = field_of("changed")
    if isinstance(changed, int) and not isinstance(changed, bool) and changed < len(changes):
        # {changed: 0}: the seeds' way to say "moved on, nothing written"; fewer than
        # asked: re-read too, the next plan sees what was written (a duplicate then).
        raise VersionConflict(f"the provider wrote {changed} of {len(changes)} changes")
    reported = normalise_documents(field_of("documents") or (), 0)
    return {d.doc: d.version for d in reported if d.version > 0}


def serialise(provider: object, owner: str) -> AbstractContextManager[Any]:
    """The provider's ``serialise(owner)``, or nothing held when it has none."""
    method = getattr(provider, "serialise", None)
    return cast(AbstractContextManager[Any], method(owner)) if callable(method) else nullcontext()


def settle(value: T | Awaitable[T]) -> T:
    """``value``, or what it resolves to when a provider answered with an awaitable
    (run to completion on a fresh event loop in this thread)."""
    if not inspect.isawaitable(value):
        return value
    try:
        asyncio.get_running_loop()
    except RuntimeError:

        async def wait() -> T:
            return await cast(Awaitable[T], value)

        return asyncio.run(wait())
    discard(value)
    raise ConfigurationError("the memory service blocks: call it from a thread, not an event loop")


def discard(awaitable: object) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()
