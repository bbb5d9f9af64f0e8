"""Embedding figures: the local model against the hashed embedder and a stand-in service.

Prints, from one run (its own Redis and PostgreSQL with pgvector; an in-process
worker; the local OpenAI-compatible stand-in for an embedding service):
  1. top-1 / top-3 over tests/data/recall_bilingual.json (24 facts, 36 paraphrased
     or cross-lingual questions): vectors alone (hashed; e5 without and with
     language centring) and the recall path (vectors and keywords fused by RRF)
     for the hashed embedder (the old default) and the local model (the new);
  2. CPU milliseconds per embedded source (a batch of the 24 facts) and per query;
  3. recall latency p50 / p95 (PersonalMemory.recall, the path /v1/recall takes)
     with 1 and 8 concurrent callers; for the local model with concurrent
     questions embedded one call each, all those waiting in one call (the
     opt-in before), and in batches spread over the process's slots (the default);
  4. backlog learned per second (sources remembered first, then one worker
     process's worth of threads drains them; no chat model) with the local model,
     the hashed embedder and the stand-in service;
  5. knowledge: top-1 / top-3 of the ranking checks of tests/support/knowledge_corpus.py
     by keywords alone (what knowledge did with the local model before) and hybrid
     with the local model (what it does now; bench_knowledge.py --local-model has
     the cross-lingual check too: docs/embeddings.md).

The machine may be shared: absolute times are noisy, the ratios side by side count.

    python bench/bench_embeddings.py [--sources 200] [--repeat 3] [--latency-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.support.bench_env import isolate  # noqa: E402

isolate()

import numpy as np  # noqa: E402
import psycopg  # noqa: E402

from memjobs_client.contracts import ReindexKnowledge, owner_key  # noqa: E402
from memjobs_worker.db import create_db_engine  # noqa: E402
from memjobs_worker.embedding.batching import QueryBatcher  # noqa: E402
from memjobs_worker.embedding.fair import BoundedEmbedder  # noqa: E402
from memjobs_worker.embedding.hashing import HashingEmbedder  # noqa: E402
from memjobs_worker.embedding.local import LocalEmbedder  # noqa: E402
from memjobs_worker.knowledge.reindex import reindex  # noqa: E402
from memjobs_worker.knowledge.schema import ensure_schema  # noqa: E402
from memjobs_worker.knowledge.search import search_knowledge  # noqa: E402
from memjobs_worker.knowledge.store import KnowledgeStore  # noqa: E402
from memjobs_worker.memory.engine.mem0_engine import Mem0Engine  # noqa: E402
from memjobs_worker.settings import Settings  # noqa: E402
from tests.support.bench_env import Scratch  # noqa: E402
from tests.support.harness import Harness  # noqa: E402
from tests.support.knowledge_corpus import DISTRACTORS, DOCS, RANKING_QUERIES, top_k_share  # noqa: E402
from tests.support.settings import build as build_settings  # noqa: E402

SET = json.loads((REPO / "tests" / "data" / "recall_bilingual.json").read_text(encoding="utf-8"))
FACTS = [f["text"] for f in SET["facts"]]
IDS = [f["id"] for f in SET["facts"]]
QUESTIONS = SET["questions"]
OWNER = "bench@example.com"
#: The owners of the concurrent-recall figure with one owner per caller: one
#: owner's questions share one model slot at a time (docs/security.md, "Bounded work").
CALLERS_OWNERS = [OWNER, *(f"bench{n}@example.com" for n in range(1, 8))]
BY_TEXT = dict(zip(FACTS, IDS, strict=True))


def accepted(question: dict[str, Any]) -> set[str]:
    return {question["fact"], *question.get("also", [])}


def score(rank: Callable[[str], list[str]]) -> tuple[int, int]:
    top1 = top3 = 0
    for question in QUESTIONS:
        got = rank(question["q"])
        top1 += bool(got[:1]) and got[0] in accepted(question)
        top3 += bool(accepted(question) & set(got[:3]))
    return top1, top3


def share(pair: tuple[int, int]) -> str:
    n = len(QUESTIONS)
    return f"top-1 {pair[0]:2}/{n} ({pair[0] / n:.0%})  top-3 {pair[1]:2}/{n} ({pair[1] / n:.0%})"


class Uncentred(LocalEmbedder):
    """The local model without language centring (for comparison only)."""

    def _means_for(self) -> dict[Any, Any]:
        return {(q, lang): np.zeros(self.dims, dtype=np.float32) for q in (False, True) for lang in ("en", "zh")}


def vectors_alone(embedder: Any) -> tuple[int, int]:
    passages = np.array(embedder.embed_batch(FACTS, "add"))

    def rank(q: str) -> list[str]:
        scores = passages @ np.array(embedder.embed(q, "search"))
        return [IDS[i] for i in np.argsort(-scores, kind="stable")]

    return score(rank)


def cpu_ms(embedder: Any, repeat: int) -> tuple[float, float]:
    """CPU ms of this process per source (embedded as one batch) and per query."""
    embedder.embed_batch(FACTS[:2], "add")  # loaded
    sources, queries = [], []
    for _ in range(repeat):
        started = time.process_time()
        embedder.embed_batch(FACTS, "add")
        sources.append((time.process_time() - started) * 1000 / len(FACTS))
        started = time.process_time()
        for q in QUESTIONS:
            embedder.embed(q["q"], "search")
        queries.append((time.process_time() - started) * 1000 / len(QUESTIONS))
    return statistics.median(sources), statistics.median(queries)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def latency(h: Harness, callers: int, rounds: int, owners: int = 1) -> tuple[float, float]:
    """Recall's p50 and p95 (ms) with ``callers`` threads asking at once, for one
    owner, or each caller for one of ``owners`` (:data:`CALLERS_OWNERS`)."""
    memory = h.runtime.personal_memory
    memory.recall(owner_key(OWNER), "warm up", 3)
    times: list[float] = []
    lock = threading.Lock()

    def caller(offset: int) -> None:
        mine = []
        for i in range(rounds * len(QUESTIONS) // callers):
            question = QUESTIONS[(i + offset) % len(QUESTIONS)]["q"]
            started = time.perf_counter()
            memory.recall(owner_key(CALLERS_OWNERS[offset % owners]), question, 3)
            mine.append((time.perf_counter() - started) * 1000)
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return percentile(times, 0.5), percentile(times, 0.95)


def main() -> int:  # noqa: C901 - the benchmark's sections, one after another
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sources", type=int, default=200, help="backlog size for learned/s")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4, help="worker threads for the backlog")
    parser.add_argument(
        "--latency-only", action="store_true", help="only the quality of the recall path and its latency"
    )
    args = parser.parse_args()
    with Scratch("embeddings") as scratch:
        workdir = scratch.dir
        pg, redis_url = scratch.postgres(), scratch.redis().url
        pg_url = pg.url
        fake = scratch.model(embedding_dims=384)

        def settings(**overrides: Any) -> Settings:
            name = f"ebench_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")
            database_url = f"postgresql://postgres@127.0.0.1:{pg.port}/{name}"
            values: dict[str, Any] = {
                "redis_url": redis_url,
                "database_url": database_url,
                "data_dir": workdir / name,
                "extract_delay_ms": 20,
                "extract_max_wait_ms": 0,
                "metrics": "off",
                "knowledge": "off",
            }
            values.update(overrides)
            return build_settings(**values)

        local, hashed = LocalEmbedder(), HashingEmbedder()
        print(
            f"== quality: {len(FACTS)} facts, {len(QUESTIONS)} questions "
            f"({sum(q['kind'] == 'crosslingual' for q in QUESTIONS)} cross-lingual) =="
        )
        print(f"  vectors alone, hashed (old default)      {share(vectors_alone(hashed))}")
        print(f"  vectors alone, e5 without centring       {share(vectors_alone(Uncentred()))}")
        print(f"  vectors alone, e5 (centred)              {share(vectors_alone(local))}")

        stacks: dict[str, Harness] = {}
        overrides: dict[str, Any]
        for label, overrides in (("hashed", {"local_embedder": "hashing"}), ("e5", {"local_embedder": "e5"})):
            h = Harness(settings(**overrides))
            h.start_worker()
            for owner in CALLERS_OWNERS:
                for text in FACTS:
                    h.client.remember(owner, text)
            h.drain()
            h.stop_worker()
            stacks[label] = h
            recall = h.runtime.personal_memory.recall
            fused = score(lambda q, r=recall: [BY_TEXT[x.text] for x in r(owner_key(OWNER), q, 3)])  # type: ignore[misc]
            print(f"  recall path (fused), {label:6}             {share(fused)}")

        print("== CPU ms per embedding (process time; noisy machine) ==")
        for label, embedder in () if args.latency_only else (("hashed", hashed), ("e5, 1 thread", local)):
            source, query = cpu_ms(embedder, args.repeat)
            print(f"  {label:14} {source:6.2f} ms per source (batch of {len(FACTS)})   {query:6.2f} ms per query")

        print("== recall latency, PersonalMemory.recall, ms (p50 / p95) ==")
        for label, h in stacks.items():
            mem_engine = h.runtime.engine
            assert isinstance(mem_engine, Mem0Engine)
            bounded = mem_engine.memory.embedding_model.embedder
            # The local model with concurrent questions embedded one call each, in one
            # batch of all those waiting (the opt-in before), and in batches spread
            # over the process's slots (the default); side by side.
            variants: dict[str, QueryBatcher | None] = {}
            if isinstance(bounded, BoundedEmbedder):
                variants = {
                    "one call each": None,
                    "one batch": QueryBatcher(bounded._query_turn, bounded._embed_queries),
                    "spread, default": QueryBatcher(
                        bounded._query_turn, bounded._embed_queries, spread=bounded.share.slots
                    ),
                }
            for variant in variants or (None,):
                if variant is not None:
                    bounded.queries = variants[variant]
                name = label if variant is None else f"{label} ({variant})"
                for callers, owners in ((1, 1), (8, 1), (8, 8)):
                    p50, p95 = latency(h, callers, args.repeat, owners)
                    print(
                        f"  {name:24} {callers} caller(s), {owners} owner(s): p50 {p50:6.1f}  p95 {p95:6.1f}"
                        f"  (load {os.getloadavg()[0]:.1f})",
                        flush=True,
                    )
        for h in stacks.values():
            h.close()
        if args.latency_only:
            return 0

        print(f"== backlog: {args.sources} sources from 10 owners, {args.threads} worker threads, no chat model ==")
        texts = [f"{FACTS[i % len(FACTS)]} ({i})" for i in range(args.sources)]
        for label, overrides in (
            ("local e5", {"local_embedder": "e5"}),
            ("hashed", {"local_embedder": "hashing"}),
            (
                "stand-in service",
                {"embedding_base_url": fake.base_url, "embedding_dims": 384, "embedding_model": "stand-in"},
            ),
        ):
            rates = []
            for _ in range(args.repeat):
                h = Harness(settings(**overrides))
                h.runtime.engine  # noqa: B018  (the engine and its model loaded before the clock)
                for i, text in enumerate(texts):
                    h.client.remember(f"owner{i % 10}@example.com", text)
                started = time.perf_counter()
                h.start_worker(threads=args.threads)
                h.drain(timeout_s=600)
                rates.append(args.sources / (time.perf_counter() - started))
                h.close()
            print(
                f"  {label:16} learned/s median {statistics.median(rates):6.1f}  "
                f"(runs: {', '.join(f'{r:.1f}' for r in rates)})"
            )

        print(
            f"== knowledge ranking checks ({len(RANKING_QUERIES)} queries, {len(DOCS)} notes and "
            f"{len(DISTRACTORS)} long distractors) =="
        )
        kset = settings(knowledge="on", local_embedder="e5")
        engine = create_db_engine(kset.database.url or "")
        ensure_schema(engine)
        store = KnowledgeStore(engine)
        docs = [{"doc_id": d, "title": t, "text": x} for d, (t, x) in {**DOCS, **DISTRACTORS}.items()]
        payload = ReindexKnowledge.model_validate({"owner_key": owner_key("k"), "consent": True, "documents": docs})
        reindex(payload, store=store, embed=local.embed_batch, dims=local.dims, knowledge=kset.knowledge)
        for mode, embed in (("keywords alone", None), ("hybrid, local e5", lambda q: local.embed(q, "search"))):

            def found(q: str, k: int, e: Any = embed) -> list[str]:
                return [
                    r.source.removeprefix("doc:")
                    for r in search_knowledge(store, owner_key("k"), q, k, embed=e).results
                ]

            print(
                f"  {mode:17} top-1 {top_k_share(1, RANKING_QUERIES, found):.2f}  "
                f"top-3 {top_k_share(3, RANKING_QUERIES, found):.2f}"
            )
        engine.dispose()
        return 0


if __name__ == "__main__":
    sys.exit(main())
