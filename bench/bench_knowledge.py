"""Knowledge figures: ranking quality with distractors, and indexing throughput.

Prints, from one run (its own PostgreSQL with pgvector; the local
OpenAI-compatible stand-in for the embedding service):
  1. recall@5 over the labelled Chinese/English queries of tests/support/knowledge_corpus.py,
     by keywords alone and hybrid (keywords + vectors fused by RRF);
  2. top-1 and top-3 over the labelled and the natural-language queries
     (RANKING_QUERIES) with the long distractor diaries (DISTRACTORS, both
     languages) indexed beside the notes, by keywords alone and hybrid, one
     result per document (the default) and all chunks;
  3. chunks indexed per second and embedding calls per chunk, for a first index
     of a synthetic corpus and for a re-index with 10 % of its documents changed.

The stand-in embeds hashed character n-grams, so its vectors are lexical: the
hybrid figure here measures the plumbing, not a real model's semantics.
``--local-model`` embeds with the embedded default's model (multilingual-e5-small,
in process) instead, and also prints the paraphrased / cross-lingual questions
(CROSSLINGUAL_QUERIES) over the notes alone and beside the distractors.

    python bench/bench_knowledge.py [--docs 200] [--local-model]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402

from memjobs_client.contracts import ReindexKnowledge, owner_key  # noqa: E402
from memjobs_worker.db import create_db_engine  # noqa: E402
from memjobs_worker.knowledge.reindex import reindex  # noqa: E402
from memjobs_worker.knowledge.schema import ensure_schema  # noqa: E402
from memjobs_worker.knowledge.search import search_knowledge  # noqa: E402
from memjobs_worker.knowledge.store import KnowledgeStore  # noqa: E402
from memjobs_worker.model_client import RemoteEmbedder  # noqa: E402
from memjobs_worker.settings import DatabaseSettings, EmbeddingSettings, RedisSettings, Settings  # noqa: E402
from tests.support.bench_env import Scratch  # noqa: E402
from tests.support.knowledge_corpus import (  # noqa: E402
    CROSSLINGUAL_QUERIES,
    DISTRACTORS,
    DOCS,
    RANKING_QUERIES,
    recall_at,
    top_k_share,
)

SENTENCES = [
    "我们周末去湖边散步。",
    "记得给猫换水。",
    "The meeting moved to Thursday.",
    "乌龙茶要用热水冲泡。",
    "Check the tyre pressure before the ride.",
    "下周二交季度报告。",
    "Buy flour and yeast.",
    "提前预订去京都的旅馆。",
    "Water the basil every morning.",
    "练琴二十分钟再休息。",
]


def synthetic(n: int, seed: int = 7) -> list[dict[str, str]]:
    rng = random.Random(seed)
    return [
        {
            "doc_id": f"doc-{i}",
            "title": f"Note {i}",
            "text": " ".join(rng.choice(SENTENCES) for _ in range(40)) + f" 编号{i}。",
        }
        for i in range(n)
    ]


def crosslingual(store: KnowledgeStore, key: str, embed: object, where: str) -> None:
    """Top-1 / top-3 of the paraphrased and cross-lingual questions, keywords alone and hybrid."""
    for mode, e in (("keywords alone", None), ("hybrid (RRF)", embed)):

        def found(q: str, k: int, e: object = e) -> list[str]:
            outcome = search_knowledge(store, key, q, k, embed=e)  # type: ignore[arg-type]
            return [r.source.removeprefix("doc:") for r in outcome.results]

        top1, top3 = (top_k_share(n, CROSSLINGUAL_QUERIES, found) for n in (1, 3))
        print(f"  cross-lingual ({len(CROSSLINGUAL_QUERIES)}), {where}, {mode:15} top-1 {top1:.2f}  top-3 {top3:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument(
        "--show-misses", action="store_true", help="print each ranking query whose document is not first"
    )
    parser.add_argument(
        "--embedding-base-url",
        default=None,
        help="a real OpenAI-compatible embedding service instead of the stand-in (key from MEMJOBS_EMBEDDING_API_KEY)",
    )
    parser.add_argument("--embedding-model", default="text-embedding-v4")
    parser.add_argument("--embedding-dims", type=int, default=1024)
    parser.add_argument(
        "--local-model", action="store_true", help="the local model (multilingual-e5-small) instead of the stand-in"
    )
    args = parser.parse_args()
    with Scratch("knowledge") as scratch:
        workdir = scratch.dir
        pg, fake = scratch.postgres(), scratch.model(embedding_dims=256)
        name = f"kbench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        engine = create_db_engine(f"postgresql://postgres@127.0.0.1:{pg.port}/{name}")
        ensure_schema(engine)
        store = KnowledgeStore(engine)
        real = args.embedding_base_url
        dims = args.embedding_dims if real else 256
        settings = Settings(
            data_dir=workdir / "data",
            redis=RedisSettings(url="redis://unused"),
            database=DatabaseSettings(url="postgresql://unused"),
            embedding=EmbeddingSettings(base_url=real or fake.base_url, dims=dims),
        )
        embedder = RemoteEmbedder(
            base_url=real or fake.base_url,
            api_key=os.environ.get("MEMJOBS_EMBEDDING_API_KEY", "bench"),
            model=args.embedding_model if real else "bench-embed",
            dims=dims,
            timeout_ms=30_000,
            max_attempts=3,
        )
        embed_query: Callable[[str], list[float]]
        embed_batch, embed_query = embedder.embed_batch, embedder.embed
        if args.local_model:
            from memjobs_worker.embedding.local import LocalEmbedder

            local = LocalEmbedder(1)
            dims = local.dims
            embed_batch, embed_query = local.embed_batch, (lambda q: local.embed(q, "search"))

        chunks_embedded: list[int] = []

        def index(owner: str, docs: list[dict[str, str]]) -> tuple[float, int, int]:
            payload = ReindexKnowledge.model_validate(
                {"owner_key": owner_key(owner), "consent": True, "documents": docs}
            )
            started = time.perf_counter()
            report = reindex(payload, store=store, embed=embed_batch, dims=dims, knowledge=settings.knowledge)
            chunks_embedded.append(report.embedded_chunks)
            return time.perf_counter() - started, report.chunks, report.embedding_calls

        labelled = [{"doc_id": d, "title": t, "text": x} for d, (t, x) in DOCS.items()]
        index("quality", labelled)
        key = owner_key("quality")
        for mode, embed in (("keywords alone", None), ("hybrid (RRF)", embed_query)):
            recall = recall_at(
                5,
                lambda q, k, e=embed: [  # type: ignore[misc]  # python/mypy#15459
                    r.source.removeprefix("doc:") for r in search_knowledge(store, key, q, k, embed=e).results
                ],
            )
            print(f"recall@5, {mode:15} {recall:.2f}  ({len(DOCS)} documents, labelled queries)")
        if args.local_model:
            crosslingual(store, key, embed_query, "the notes alone")

        noisy = labelled + [{"doc_id": d, "title": t, "text": x} for d, (t, x) in DISTRACTORS.items()]
        index("ranking", noisy)
        key = owner_key("ranking")
        print(
            f"with {len(DISTRACTORS)} long distractors ({sum(len(x) for _, x in DISTRACTORS.values()):,} "
            f"characters) beside the {len(DOCS)} notes, {len(RANKING_QUERIES)} queries:"
        )
        for mode, embed in (("keywords alone", None), ("hybrid (RRF)", embed_query)):
            for shape, every in (("one per document", False), ("all chunks", True)):

                def found(q: str, k: int, e: object = embed, a: bool = every) -> list[str]:
                    outcome = search_knowledge(store, key, q, k, embed=e, all_chunks=a)  # type: ignore[arg-type]
                    return [r.source.removeprefix("doc:") for r in outcome.results]

                top1, top3 = (top_k_share(n, RANKING_QUERIES, found) for n in (1, 3))
                print(f"  {mode:15} {shape:17} top-1 {top1:.2f}  top-3 {top3:.2f}")
                if args.show_misses and not every:
                    for q, expected in RANKING_QUERIES:
                        got = found(q, 3)
                        if got[:1] != [expected]:
                            print(f"    miss: {q!r} -> {got} (expected {expected})")
        if args.local_model:
            crosslingual(store, key, embed_query, "beside the distractors")

        corpus = synthetic(args.docs)
        seconds, chunks, calls = index("throughput", corpus)
        chunk_total = chunks
        print(
            f"first index:   {chunks} chunks in {seconds:.2f} s = {chunks / seconds:,.0f} chunks/s, "
            f"{calls} embedding calls = {calls / chunks:.3f} calls/chunk"
        )
        changed = [dict(d, text=d["text"] + " 更新了一句。") if i % 10 == 0 else d for i, d in enumerate(corpus)]
        seconds, chunks, calls = index("throughput", changed)
        embedded = chunks_embedded[-1]
        print(
            f"re-index, 10 % of documents changed: {chunks} chunks rewritten in {seconds:.2f} s, "
            f"{calls} embedding calls, {embedded} chunks embedded = {embedded / chunk_total:.3f} of all chunks"
        )
        engine.dispose()
        return 0


if __name__ == "__main__":
    sys.exit(main())
