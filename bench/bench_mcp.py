"""Knowledge recall over MCP against the same search from the CLI: p50 and p95.

Prints, side by side, the latency of one knowledge search (k=5, hybrid: the
local OpenAI-compatible stand-in embeds each query) over the labelled and
natural-language queries of tests/support/knowledge_corpus.py, asked:
  1. in process: the search function both doors call (no door at all);
  2. by the CLI: one `memjobs knowledge search --json` process per query, as a
     script would run it (process start-up included);
  3. over MCP stdio: `recall` in one running `memjobs mcp --owner` session
     (the SDK's client; the round trip through the JSON-RPC pipe included);
  4. over MCP streamable HTTP: `recall` at /mcp of a running HTTP API (loopback,
     host token), one SDK client session.
Its own Redis and PostgreSQL with pgvector, started here and removed after.

    python bench/bench_mcp.py [--rounds 5] [--cli-queries 20]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import anyio  # noqa: E402
import httpx2  # noqa: E402
import psycopg  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from memjobs_client.contracts import ReindexKnowledge, owner_key  # noqa: E402
from memjobs_worker.endpoints import Endpoints  # noqa: E402
from memjobs_worker.http.serve import ApiServer  # noqa: E402
from memjobs_worker.knowledge.reindex import reindex  # noqa: E402
from memjobs_worker.knowledge.search import search_with  # noqa: E402
from memjobs_worker.runtime import open_door  # noqa: E402
from tests.support.bench_env import Scratch  # noqa: E402
from tests.support.knowledge_corpus import DISTRACTORS, DOCS, RANKING_QUERIES  # noqa: E402
from tests.support.settings import build as build_settings  # noqa: E402

OWNER = "bench-mcp"
HOST_TOKEN = "bench-host-token-0123456789abcdef"
DIMS = 256


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="passes over the queries (in process, MCP)")
    parser.add_argument("--cli-queries", type=int, default=20, help="CLI processes started")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)  # before the SDK's own set-up: no INFO per request
    queries = [q for q, _ in RANKING_QUERIES]
    with Scratch("mcp") as scratch:
        workdir = scratch.dir
        pg, redis_server, fake = scratch.postgres(), scratch.redis(), scratch.model(embedding_dims=DIMS)
        name = f"mcpbench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        database_url = f"postgresql://postgres@127.0.0.1:{pg.port}/{name}"
        env = {
            "MEMJOBS_REDIS_URL": redis_server.url,
            "MEMJOBS_DATABASE_URL": database_url,
            "MEMJOBS_DATA_DIR": str(workdir / "data"),
            "MEMJOBS_EMBEDDING_BASE_URL": fake.base_url,
            "MEMJOBS_EMBEDDING_API_KEY": "bench",
            "MEMJOBS_EMBEDDING_DIMS": str(DIMS),
            "NOVA_AUDIO_AGENT_MEMORY_PROVIDER": "off",
            "MEMJOBS_LOG_LEVEL": "WARNING",
            "MEMJOBS_API_HOST_TOKEN": HOST_TOKEN,
            "MEMJOBS_API_PORT": "0",
            "MEMJOBS_KNOWLEDGE": "on",
        }  # opt-in
        settings = build_settings(
            **{k.removeprefix("MEMJOBS_").lower(): v for k, v in env.items() if k.startswith("MEMJOBS_")},
            memory_provider="off",
        )
        endpoints = Endpoints(redis_url=redis_server.url, database_url=database_url)
        runtime = open_door(settings, endpoints)
        docs = [{"doc_id": d, "title": t, "text": x} for d, (t, x) in {**DOCS, **DISTRACTORS}.items()]
        embedder = runtime.knowledge_embedder
        assert embedder is not None
        reindex(
            ReindexKnowledge.model_validate({"owner_key": owner_key(OWNER), "consent": True, "documents": docs}),
            store=runtime.knowledge,
            embed=embedder.embed_batch,
            dims=DIMS,
            knowledge=settings.knowledge,
        )
        key = owner_key(OWNER)
        rows: list[tuple[str, list[float]]] = []

        search = partial(search_with, runtime.knowledge, embedder, key)
        search(queries[0], 5)  # warm
        rows.append(
            (
                "in process (the search both doors call)",
                [timed(partial(search, q, 5)) for _ in range(args.rounds) for q in queries],
            )
        )

        child_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("MEMJOBS_")},
            **env,
            "PYTHONPATH": str(REPO),
        }
        cli = [
            sys.executable,
            "-m",
            "memjobs_worker.cli.main",
            "knowledge",
            "search",
            "--owner",
            OWNER,
            "--k",
            "5",
            "--json",
            "--query",
        ]
        rows.append(
            (
                "CLI: memjobs knowledge search (a process each)",
                [
                    timed(partial(subprocess.run, [*cli, q], env=child_env, capture_output=True, check=True))
                    for q in queries[: args.cli_queries]
                ],
            )
        )

        async def over(client: Client) -> list[float]:
            await client.call_tool("recall", {"query": queries[0], "k": 5})  # warm
            samples = []
            for _ in range(args.rounds):
                for q in queries:
                    started = time.perf_counter()
                    result = await client.call_tool("recall", {"query": q, "k": 5})
                    samples.append(time.perf_counter() - started)
                    assert not result.is_error, result
            return samples

        async def stdio() -> list[float]:
            params = StdioServerParameters(
                command=sys.executable,
                env=child_env,
                cwd=REPO,
                args=["-m", "memjobs_worker.cli.main", "mcp", "--owner", OWNER],
            )
            with open(workdir / "mcp.log", "w") as errlog:
                async with Client(stdio_client(params, errlog=errlog)) as client:
                    return await over(client)

        rows.append(("MCP stdio: recall in one memjobs mcp session", anyio.run(stdio)))

        api = ApiServer(settings, endpoints)
        url = api.start()
        try:

            async def http() -> list[float]:
                headers = {"Authorization": f"Bearer {HOST_TOKEN}", "X-Memjobs-Owner": OWNER}
                async with (
                    httpx2.AsyncClient(headers=headers, timeout=30) as client_http,
                    Client(streamable_http_client(f"{url}/mcp", http_client=client_http)) as client,
                ):
                    return await over(client)

            rows.append(("MCP HTTP: recall at /mcp, one client session", anyio.run(http)))
        finally:
            api.stop()
        runtime.close()
        runtime.client.close()

        print(f"knowledge recall, k=5, hybrid; {len(docs)} documents, {len(queries)} queries")
        print(f"{'':48} {'n':>5} {'p50 ms':>8} {'p95 ms':>8}")
        for label, samples in rows:
            p50, p95 = percentiles(samples)
            print(f"{label:48} {len(samples):5d} {p50:8.1f} {p95:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
