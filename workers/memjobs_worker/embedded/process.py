"""Small helpers shared by the embedded servers: free ports, readiness waits, live pids."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    """Ask the kernel for a port nobody listens on right now.

    Another process may take it before the server binds; callers retry.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_until(ready: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    """Poll ``ready`` until it returns True; a start-up wait, not a test sync.

    Raises:
        TimeoutError: ``what`` did not become ready in time.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.02
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} was not ready after {timeout_s:.0f} s")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has exited
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True
