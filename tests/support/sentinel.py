"""A Redis master, a replica and three sentinels started by a test (real
``redis-server`` processes), on loopback or on an address inside a network
namespace (``prefix`` runs each command there, e.g. ``ip netns exec svc``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import redis

from memjobs_worker.embedded.process import free_port
from memjobs_worker.embedded.redis import find_redis_server

MASTER_NAME = "memjobs"


class SentinelSet:
    """Master + replica + 3 sentinels; ``kill_master()`` and wait for the failover."""

    def __init__(
        self, directory: Path, *, host: str = "127.0.0.1", prefix: tuple[str, ...] = (), ports: list[int] | None = None
    ) -> None:
        self.directory = directory
        self.host = host
        self.prefix = prefix
        self.ports = ports or [free_port() for _ in range(5)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def master_port(self) -> int:
        return self.ports[0]

    @property
    def sentinels(self) -> str:
        return ",".join(f"{self.host}:{p}" for p in self.ports[2:])

    def _spawn(self, name: str, args: list[str]) -> None:
        self.procs[name] = subprocess.Popen(
            [*self.prefix, find_redis_server(), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _server_args(self, name: str, port: int) -> list[str]:
        data = self.directory / name
        data.mkdir(parents=True, exist_ok=True)
        return [
            "--bind",
            self.host,
            "--port",
            str(port),
            "--dir",
            str(data),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
            "--protected-mode",
            "no",
            "--logfile",
            str(data / "redis.log"),
        ]

    def start(self, timeout_s: float = 30) -> None:
        master, replica = self.ports[0], self.ports[1]
        self._spawn("master", self._server_args("master", master))
        self._spawn("replica", [*self._server_args("replica", replica), "--replicaof", self.host, str(master)])
        for i, port in enumerate(self.ports[2:]):
            conf = self.directory / f"sentinel-{i}.conf"
            conf.write_text(
                f"port {port}\nbind {self.host}\nprotected-mode no\ndir {self.directory}\n"
                f"logfile {self.directory / f'sentinel-{i}.log'}\n"
                f"sentinel monitor {MASTER_NAME} {self.host} {master} 2\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
                f"sentinel failover-timeout {MASTER_NAME} 5000\n"
                f"sentinel parallel-syncs {MASTER_NAME} 1\n"
            )
            self._spawn(f"sentinel-{i}", [str(conf), "--sentinel"])
        deadline = time.monotonic() + timeout_s
        while not self._ready():
            if time.monotonic() > deadline:
                raise TimeoutError("the Sentinel set did not come up")
            time.sleep(0.1)

    def client(self, port: int) -> redis.Redis:
        """A plain client on one server of the set."""
        return self._client(port)

    def _client(self, port: int) -> redis.Redis:
        return redis.Redis(host=self.host, port=port, socket_timeout=1, socket_connect_timeout=1)

    def _ready(self) -> bool:
        try:
            link = self._client(self.ports[1]).info("replication").get("master_link_status")
            known = [
                self._client(p).execute_command(  # type: ignore[no-untyped-call]
                    "SENTINEL", "REPLICAS", MASTER_NAME
                )
                for p in self.ports[2:]
            ]
            return link == "up" and all(known)
        except redis.RedisError:
            return False

    def master_address(self) -> tuple[str, int]:
        for port in self.ports[2:]:
            try:
                host, master_port = self._client(port).execute_command(  # type: ignore[no-untyped-call]
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME
                )
                return (host.decode() if isinstance(host, bytes) else str(host), int(master_port))
            except redis.RedisError:
                continue
        raise RuntimeError("no sentinel answers")

    def kill_master(self) -> str:
        """SIGKILL the current master; returns its name (to restart it later)."""
        _, port = self.master_address()
        name = "master" if port == self.ports[0] else "replica"
        self.procs[name].kill()
        self.procs[name].wait()
        return name

    def restart(self, name: str) -> None:
        """Start a killed server again; the sentinels make it a replica of the new master."""
        port = self.ports[0] if name == "master" else self.ports[1]
        self._spawn(name, self._server_args(name, port))

    def rejoin(self, name: str, new_master: int, timeout_s: float = 120) -> None:
        """Wait for the restarted ``name`` to replicate ``new_master``. The sentinels
        reconfigure it; once in a soak run they had not after 120 s, so after 30 s
        the test does what an operator would (REPLICAOF) and goes on waiting."""
        deadline = time.monotonic() + timeout_s
        nudged = time.monotonic() + 30
        port = self.ports[0] if name == "master" else self.ports[1]
        while not self.replicas_in_sync(new_master):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} never rejoined as a replica")
            if nudged and time.monotonic() > nudged:
                try:
                    self._client(port).execute_command(  # type: ignore[no-untyped-call]
                        "REPLICAOF", self.host, new_master
                    )
                    nudged = 0
                except redis.RedisError:
                    pass
            time.sleep(0.1)

    def replicas_in_sync(self, port: int) -> bool:
        try:
            info = self._client(port).info("replication")
            return int(info.get("connected_slaves", 0)) >= 1
        except redis.RedisError:
            return False

    def wait_failover(self, old_port: int, timeout_s: float = 60) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                _, port = self.master_address()
                if port != old_port and self._client(port).info("replication")["role"] == "master":
                    return port
            except (RuntimeError, redis.RedisError):
                pass
            time.sleep(0.1)
        raise TimeoutError("no failover")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
