"""The one seam between memjobs and redis-py's errors and replies.

Every Redis call outside the broker's Dramatiq internals meets redis-py's
errors here, in one of two forms:

- :func:`redis_errors`: Redis not answering is the caller's
  ``BackendUnavailable`` ("Redis did not answer: …", or the message the caller
  names), or whatever error ``translate`` makes of it.
- :func:`redis_best_effort`: a write the caller can do without (a heartbeat, a
  metric, a cleanup the TTL also does): a ``RedisError`` is kept on the
  :class:`Attempt` instead of raised, for the caller to log or answer a default.

Replies come as ``bytes`` (or ``str`` on a client that decodes them):
:func:`as_str` and :func:`as_bytes` take either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from memjobs_client.errors import BackendUnavailable, MemjobsError

#: The message of a Redis call that failed, unless its caller names another.
DID_NOT_ANSWER = "Redis did not answer"

#: Any error of redis-py: for a backstop that sorts raw errors by backend
#: (the HTTP API's, among the database's), not for a Redis call's own handling.
RedisError = redis.RedisError


class redis_errors:  # noqa: N801 - used as a function: ``with redis_errors("…"):``
    """Raise a ``RedisError`` of the block as ``BackendUnavailable("{message}: {error}")``,
    or as what ``translate`` makes of it; the Redis error is its ``__cause__``.
    Never swallows an error (so a ``return`` in the block is the function's last)."""

    def __init__(
        self, message: str = DID_NOT_ANSWER, *, translate: Callable[[redis.RedisError], MemjobsError] | None = None
    ) -> None:
        self.message = message
        self.translate = translate

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if isinstance(exc, redis.RedisError):
            translated = self.translate(exc) if self.translate is not None else None
            raise (translated or BackendUnavailable(f"{self.message}: {exc}")) from exc


@dataclass
class Attempt:
    """What became of a :func:`redis_best_effort` block: ``error`` is the Redis
    error that ended it early, None when it ran to its end."""

    error: redis.RedisError | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


class redis_best_effort:  # noqa: N801 - used as a function: ``with redis_best_effort() as attempt:``
    """Run the block; a ``RedisError`` ends it and is kept on the yielded
    :class:`Attempt` instead of raised (the code after the block runs).
    Any other error goes on."""

    def __enter__(self) -> Attempt:
        self.attempt = Attempt()
        return self.attempt

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        if isinstance(exc, redis.RedisError):
            self.attempt.error = exc
            return True
        return False


def as_str(raw: object) -> str:
    """A Redis reply (``bytes`` decoded as UTF-8, else ``str()``) as text."""
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def as_bytes(raw: object) -> bytes:
    """A Redis reply as bytes (``str()`` encoded as UTF-8 when not bytes already)."""
    return raw if isinstance(raw, bytes) else str(raw).encode()


def evalsha_each(
    client: redis.Redis, script: Script, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]
) -> list[Any]:
    """Run ``script`` once for each (keys, args) of ``calls``, all in one
    pipeline (one round trip): each call's answer, in order.

    redis-py's scripts in a pipeline ask ``SCRIPT EXISTS`` first, a round trip
    more each time. Here a Redis that lost the script (restarted, flushed) is
    given it, and only the calls that did not run are sent again: none runs twice.

    Raises:
        redis.RedisError: Redis did not answer, or the first error a call answered.
    """
    answers: list[Any] = [None] * len(calls)
    todo = list(range(len(calls)))
    for attempt in (1, 2):
        pipe = client.pipeline(transaction=False)
        for i in todo:
            keys, args = calls[i]
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        missing = []
        for i, answer in zip(todo, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(answer, NoScriptError) and attempt == 1:
                missing.append(i)
            elif isinstance(answer, Exception):
                raise answer
            else:
                answers[i] = answer
        if not missing:
            break
        client.script_load(script.script)
        todo = missing
    return answers
