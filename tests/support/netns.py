"""Hosts as network namespaces on this machine: one bridge (in a namespace of
its own, so the machine's own network is not touched), a veth pair per
namespace, addresses in 10.213.77.0/24 that exist only inside them.

A thread can enter a namespace (``run_in``): sockets it creates, threads it
starts and processes it spawns live there. Partitions are blackhole routes in
the partitioned namespace (no firewall tool needed): its packets to the
address go nowhere, other addresses stay reachable.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
SUBNET = "10.213.77"
CLONE_NEWNET = 0x40000000


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs the suite as root)"
    probe = f"mjprobe{uuid.uuid4().hex[:6]}"
    try:
        result = ip("netns", "add", probe, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"`ip netns` is not available: {exc}"
    if result.returncode != 0:
        return f"`ip netns add` failed: {result.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


class Topology:
    """Namespaces ``<prefix>-<role>`` on one bridge; ``address(role)`` is theirs."""

    def __init__(self, roles: list[str]) -> None:
        self.prefix = f"mj{uuid.uuid4().hex[:5]}"
        self.roles = roles
        self.bridge_ns = f"{self.prefix}-net"
        self.addresses = {role: f"{SUBNET}.{i + 2}" for i, role in enumerate(roles)}
        self.created: list[str] = []

    def ns(self, role: str) -> str:
        return f"{self.prefix}-{role}"

    def address(self, role: str) -> str:
        return self.addresses[role]

    def exec_prefix(self, role: str) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.ns(role))

    def create(self) -> None:
        for name in [self.bridge_ns, *(self.ns(r) for r in self.roles)]:
            ip("netns", "add", name)
            self.created.append(name)
            ip("-n", name, "link", "set", "lo", "up")
        ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        for i, role in enumerate(self.roles):
            outer, inner = f"v{i}", "eth0"
            ip(
                "-n",
                self.bridge_ns,
                "link",
                "add",
                outer,
                "type",
                "veth",
                "peer",
                "name",
                inner,
                "netns",
                self.ns(role),
            )
            ip("-n", self.bridge_ns, "link", "set", outer, "master", "br0", "up")
            ip("-n", self.ns(role), "addr", "add", f"{self.address(role)}/24", "dev", inner)
            ip("-n", self.ns(role), "link", "set", inner, "up")

    def partition(self, role: str, from_role: str) -> None:
        """``role`` can no longer reach ``from_role``'s address (other paths stay)."""
        ip("-n", self.ns(role), "route", "add", "blackhole", f"{self.address(from_role)}/32")

    def heal(self, role: str, from_role: str) -> None:
        ip("-n", self.ns(role), "route", "del", "blackhole", f"{self.address(from_role)}/32", check=False)

    def pids(self, role: str) -> list[int]:
        out = ip("netns", "pids", self.ns(role), check=False).stdout
        return [int(p) for p in out.split()]

    def destroy(self) -> None:
        """Kill every process left in the namespaces, then delete them (veths go too)."""
        for name in reversed(self.created):
            out = ip("netns", "pids", name, check=False).stdout
            for pid in (int(p) for p in out.split()):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for name in reversed(self.created):
            ip("netns", "del", name, check=False)
        self.created.clear()


def run_in(ns: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` in a new thread that has entered network namespace ``ns``."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            enter(ns)
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"netns-{ns}")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def enter(ns: str) -> None:
    """Move the calling thread into network namespace ``ns`` (setns(2))."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({ns}): {os.strerror(err)}")
    finally:
        os.close(fd)
