"""Benchmark: what serving the API with uvicorn's h11 protocol costs next to httptools.

The API runs on h11 because h11 bounds a header block still arriving
(``h11_max_incomplete_event_size``) and httptools has no such setting
(docs/security.md). This measures the price: the same app (the guard and
every middleware included), served by a separate process with one protocol
or the other, alternating, answering ``GET /healthz`` (no backend: the
protocol's share is largest there) and ``GET /openapi.json`` (no token: the
guard, a slot and 145 KB out) to a keep-alive asyncio client.

``--deadline`` measures instead what the header deadline costs (the protocol
held by :class:`~memjobs_worker.http.deadline.HeaderDeadline` and the
:class:`~memjobs_worker.http.deadline.MarksRequests` middleware, as
``memjobs api`` serves), each parser with and without it, alternating.

    python bench/bench_http_protocol.py [--requests 3000] [--concurrency 16] [--rounds 3] [--deadline]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SERVER = """
import socket, sys, uvicorn
from memjobs_worker.endpoints import Endpoints
from memjobs_worker.http.app import QuietErrors, create_app
from memjobs_worker.http.deadline import MarksRequests, header_deadline
from memjobs_worker.http.guard import MAX_HEADER_BYTES
from memjobs_worker.settings import Settings
app = create_app(Settings(api_max_per_client=10_000, api_max_public_in_flight=10_000),
                 Endpoints("redis://127.0.0.1:1/0", "postgresql://u@127.0.0.1:1/d"))
sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen(1024)
print(sock.getsockname()[1], flush=True)
parser, _, deadline = sys.argv[1].partition("+")
served, http = QuietErrors(app), parser
if deadline:
    served, http = MarksRequests(served), header_deadline(parser, 10.0, lambda: None)
uvicorn.Server(uvicorn.Config(served, http=http, log_config=None, access_log=False,
               lifespan="off", h11_max_incomplete_event_size=MAX_HEADER_BYTES)).run(sockets=[sock])
"""


async def client(port: int, path: str, count: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    for _ in range(count):
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        )
        await reader.readexactly(length)
    writer.close()


async def rate(port: int, path: str, requests: int, concurrency: int) -> float:
    started = time.perf_counter()
    await asyncio.gather(*(client(port, path, requests // concurrency) for _ in range(concurrency)))
    return (requests // concurrency * concurrency) / (time.perf_counter() - started)


def run(protocol: str, path: str, requests: int, concurrency: int) -> float:
    proc = subprocess.Popen([sys.executable, "-c", SERVER, protocol], stdout=subprocess.PIPE, cwd=REPO)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)):
            pass
        asyncio.run(rate(port, path, 200, 4))  # warm
        return asyncio.run(rate(port, path, requests, concurrency))
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--deadline", action="store_true", help="each parser with and without the header deadline")
    args = parser.parse_args()
    if args.deadline:
        return compare_deadline(args)
    for path in ("/healthz", "/openapi.json"):
        rates: dict[str, list[float]] = {"httptools": [], "h11": []}
        for _ in range(args.rounds):  # alternating, so the machine's load falls on both
            for protocol in rates:
                rates[protocol].append(run(protocol, path, args.requests, args.concurrency))
        h11, tools = statistics.median(rates["h11"]), statistics.median(rates["httptools"])
        print(
            f"GET {path}: httptools {tools:.0f} req/s, h11 {h11:.0f} req/s "
            f"(median of {args.rounds}; h11 costs {100 * (1 - h11 / tools):.0f} %) "
            f"runs: {[round(r) for r in rates['httptools']]} / {[round(r) for r in rates['h11']]}"
        )
    return 0


def compare_deadline(args: argparse.Namespace) -> int:
    for path in ("/healthz", "/openapi.json"):
        for parser in ("h11", "httptools"):
            rates: dict[str, list[float]] = {parser: [], f"{parser}+deadline": []}
            for _ in range(args.rounds):  # alternating, so the machine's load falls on both
                for variant in rates:
                    rates[variant].append(run(variant, path, args.requests, args.concurrency))
            bare, held = (statistics.median(r) for r in rates.values())
            print(
                f"GET {path} {parser}: {bare:.0f} req/s, with the deadline {held:.0f} req/s "
                f"(median of {args.rounds}; the deadline costs {100 * (1 - held / bare):.1f} %) "
                f"runs: {[round(r) for r in rates[parser]]} / "
                f"{[round(r) for r in rates[f'{parser}+deadline']]}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
