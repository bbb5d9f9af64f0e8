"""Benchmark: one memory-tool edit (an append to MEMORY.md through the memory
service), per provider, with and without the audit row in the state database.

Prints p50 and p95 latency of one edit, from one run on one machine, for the
built-in providers (Markdown files, the SQL table) and the example adapter that
keeps the documents behind a small HTTP service (tests/support/memory_adapter.py),
each without an audit and with the ``memory_audit`` table (what every patch
costs since the audit moved from a local JSON Lines file to the state database).
Everything runs here: its own PostgreSQL in a temporary directory.

    python bench/bench_memory_tool.py [--edits 300]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.support.bench_env import isolate  # noqa: E402

isolate()

from bench.bench_pipeline import fresh_database  # noqa: E402
from memjobs_worker.db import create_db_engine  # noqa: E402
from memjobs_worker.embedded import EmbeddedPostgres  # noqa: E402
from memjobs_worker.sessions.memory_docs import (  # noqa: E402
    AuditTrail,
    ChangeContext,
    Edit,
    MarkdownFileProvider,
    MemoryService,
    SqlMemoryProvider,
)
from tests.support.memory_adapter import RecordsMemoryAdapter  # noqa: E402
from tests.support.records_service import RecordsService  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run(service: MemoryService, edits: int, owner: str) -> tuple[float, float]:
    context = ChangeContext("memory_tool", session="bench", turn="t")
    latencies = []
    for i in range(edits):
        started = time.perf_counter()
        outcome = service.edit(owner, [Edit("append", "MEMORY.md", text=f"- fact {i:04d}")], context=context)
        latencies.append(time.perf_counter() - started)
        assert outcome.applied
    return percentile(latencies, 0.5) * 1000, percentile(latencies, 0.95) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memjobs-bench-") as tmp, RecordsService() as records:
        base = Path(tmp)
        pg = EmbeddedPostgres(base / "pg")
        pg.start()
        try:
            engine = create_db_engine(fresh_database(pg))
            audit = AuditTrail(engine)
            providers: dict[str, Any] = {
                "markdown": lambda: MarkdownFileProvider(base / "memory"),
                "sql": lambda: SqlMemoryProvider(engine),
                "http adapter": lambda: RecordsMemoryAdapter(records.url),
            }
            # Documents are capped at 8000 characters: 300 edits of ~12 characters fit.
            print(f"one append through the memory service, {args.edits} edits each (p50 / p95 ms)")
            for name, make in providers.items():
                row = []
                for with_audit in (False, True):
                    service = MemoryService(make(), max_doc_chars=20_000, audit=audit if with_audit else None)
                    p50, p95 = run(service, args.edits, f"bench/{name}/{with_audit}")
                    row.append(f"{p50:6.2f} / {p95:6.2f}")
                print(f"  {name:<14} no audit {row[0]}   audit table {row[1]}", flush=True)
            engine.dispose()
        finally:
            pg.stop()


if __name__ == "__main__":
    main()
