"""Small helpers shared by the embedded servers: free ports, readiness waits, live pids.

Processes are read through psutil, so the same code serves Linux and macOS.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

import psutil


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
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def process_name(pid: int) -> str | None:
    """The command name of ``pid`` (``redis-server``, ``postgres``), or None if it is gone."""
    try:
        return str(psutil.Process(pid).name())
    except psutil.Error:
        return None


def process_cmdline(pid: int) -> str:
    """The command line of ``pid`` joined by spaces; empty if it is gone or unreadable."""
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (its leader may be gone)."""
    members = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid and pid_alive(pid):
                members.append(pid)
        except OSError:  # gone meanwhile
            continue
    return members
