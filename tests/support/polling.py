"""Waiting on another process or thread: poll a probe until it holds, with a
deadline and a message that says what was awaited.

A test uses this only where there is no event to block on (the state of
another process: a row in the ledger, a Redis key, a line in a worker's log).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], timeout_s: float, what: str, *, poll_s: float = 0.05) -> T:
    """Call ``probe`` until it returns something truthy, and return that (never None).

    Raises:
        AssertionError: ``probe`` was still falsy ``timeout_s`` seconds on
            (the message names ``what`` was awaited and the last value seen).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what} (last seen: {value!r})")
        time.sleep(poll_s)
