"""A real ``memjobs api`` process, as operators run it, for the tests that load it
(its event loop, threads and model are its own, not the test's), and the probes
that time another owner's requests while it is under attack."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from memjobs_worker.settings import Settings
from tests.support.harness import REPO, worker_env
from tests.support.polling import wait_for


@dataclass
class ApiProcess:
    """A ``memjobs api`` process, its URL and its log file."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


@contextmanager
def api_process(settings: Settings, log: Path) -> Iterator[ApiProcess]:
    """``memjobs api`` on ``settings`` (``api_port=0``), its stderr in ``log``;
    stopped (its process group) on exit."""
    out = open(log, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "memjobs"), "api"],
        env=worker_env(settings),
        stdout=subprocess.PIPE,
        stderr=out,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()  # the first line names the URL, or the process ended
        assert "memjobs API on http://" in line, (line, log.read_text())
        yield ApiProcess(proc, line.split(" on ", 1)[1].split(";", 1)[0], log)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(20)
        out.close()


@dataclass(frozen=True)
class Probes:
    """The statuses and latencies (ms) of one kind of probe."""

    statuses: list[int]
    ms: list[float]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.ms)

    def figures(self) -> str:
        ordered = sorted(self.ms)
        return (
            f"median {self.median_ms:.1f} ms, p90 {ordered[int(len(ordered) * 0.9)]:.1f} ms, "
            f"max {ordered[-1]:.1f} ms over {len(ordered)}"
        )


def probe(send: Callable[[httpx.Client], httpx.Response], url: str, times: int) -> Probes:
    """``times`` requests, each on a new connection (a new client), one after another."""
    statuses, ms = [], []
    for _ in range(times):
        with httpx.Client(base_url=url, timeout=30) as client:
            started = time.perf_counter()
            statuses.append(send(client).status_code)
            ms.append((time.perf_counter() - started) * 1000)
    return Probes(statuses, ms)


def owner_sources(url: str, headers: dict[str, str], owner: str) -> list[dict[str, Any]]:
    """``owner``'s sources, as ``GET /v1/sources`` lists them."""
    r = httpx.get(f"{url}/v1/sources", headers={**headers, "X-Memjobs-Owner": owner}, timeout=60)
    assert r.status_code == 200, r.text
    sources: list[dict[str, Any]] = r.json()["sources"]
    return sources


def owner_states(url: str, headers: dict[str, str], owner: str) -> list[str]:
    """The states of ``owner``'s sources."""
    return [s["state"] for s in owner_sources(url, headers, owner)]


#: How soon another owner's new source must be learned while one owner attacks (issue 31).
LEARNED_WITHIN_S = 60.0


def learned_within(url: str, headers: dict[str, str], owner: str, text: str) -> float:
    """Remember ``text`` for ``owner`` through the door and wait (at most
    :data:`LEARNED_WITHIN_S`) until the workers have learned it: the seconds it took."""
    started = time.monotonic()
    r = httpx.post(f"{url}/v1/remember", headers=headers, timeout=60, json={"owner_id": owner, "text": text})
    assert r.status_code == 202, r.text
    source_id = r.json()["source_id"]

    def learned() -> bool:
        return any(s["source_id"] == source_id and s["state"] == "learned" for s in owner_sources(url, headers, owner))

    wait_for(learned, LEARNED_WITHIN_S, f"{owner}'s new source learned", poll_s=0.2)
    return time.monotonic() - started
