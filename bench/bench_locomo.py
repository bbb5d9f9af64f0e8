"""LoCoMo recall: does memjobs find the turn that answers a question about a long conversation?

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
Agents", ACL 2024) is published in the public repository snap-research/locomo,
file data/locomo10.zip (ten conversations). It is not part of memjobs: give the
directory that holds its conversation files (``26.json``... or ``locomo10.json``)
with ``--data``. Nothing of it is stored by this script outside a temporary
directory and the embedding cache (``--cache``, under /tmp).

Each conversation is one owner; each turn is remembered as one source, text
``"[<session date>] <speaker>: <text>"`` plus ``" (photo: <caption>)"`` when the
turn shared a photo. Each question of categories 1-4 is asked with ``limit`` 10;
a hit is a returned memory whose sources include one of the question's evidence
turns. Printed, from one run: top-1/5/10 overall and by category for

  - memjobs recall (``--mode full``: the embedded default, no chat model, so
    verbatim learning and the local e5 model, on its own Redis and PostgreSQL
    with an in-process worker, each turn through the producer client and each
    question through ``PersonalMemory.recall``, the path ``/v1/recall`` takes;
    ``--mode fast``: the same ranking code and SQL on the same vectors, the turns
    written straight into the vector table, for quick runs while tuning);
  - BM25 (Okapi, k1 1.2, b 0.75, lower-cased words) over the same turns;
  - multilingual-e5-small alone: cosine of its vectors, no centring, no fusion;

plus, in full mode, learning throughput (sources/s, from the first source queued
to the last learned) and recall latency p50 / p95. ``--loco`` (fast mode) checks
the ranking choices by leave-one-conversation-out.

    python bench/bench_locomo.py --data ../shared/data/locomo-dev [--mode full|fast]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.support.bench_env import isolate  # noqa: E402

isolate()

import numpy as np  # noqa: E402

PUBLISHED = "LoCoMo: public repository snap-research/locomo, file data/locomo10.zip"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
TOPS = (1, 5, 10)
LIMIT = 10


@dataclass
class Conversation:
    name: str
    turns: list[tuple[str, str]] = field(default_factory=list)  # (dia_id, text)
    questions: list[tuple[str, int, set[str]]] = field(default_factory=list)  # (question, category, evidence)


def turn_text(date: str, turn: dict[str, Any]) -> str:
    """What is remembered for one turn: the issue's form."""
    text = f"[{date}] {turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" (photo: {turn['blip_caption']})"
    return text


def load(data: Path) -> list[Conversation]:
    files = sorted(data.glob("*.json"))
    if not files:
        raise SystemExit(f"no conversation files in {data}. {PUBLISHED}")
    out = []
    for path in files:
        raw = json.loads(path.read_text(encoding="utf-8"))
        for i, sample in enumerate(raw if isinstance(raw, list) else [raw]):
            conv = sample.get("conversation", sample)
            c = Conversation(path.stem if len(files) > 1 or not isinstance(raw, list) else f"{path.stem}-{i}")
            sessions = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
            for n in sessions:
                date = conv.get(f"session_{n}_date_time", "")
                c.turns += [(t["dia_id"], turn_text(date, t)) for t in conv[f"session_{n}"]]
            c.questions = [
                (q["question"], int(q["category"]), set(q.get("evidence", [])))
                for q in sample["qa"]
                if int(q["category"]) in CATEGORIES
            ]
            out.append(c)
    return out


class Tally:
    """Hits at each top-k, overall and by category."""

    def __init__(self) -> None:
        self.asked: Counter[int] = Counter()
        self.found: dict[int, Counter[int]] = {k: Counter() for k in TOPS}

    def add(self, category: int, evidence: set[str], ranked: Sequence[set[str]]) -> None:
        self.asked[category] += 1
        for k in TOPS:
            self.found[k][category] += any(evidence & turns for turns in ranked[:k])

    def share(self, k: int, category: int | None = None) -> float:
        asked = self.asked[category] if category else sum(self.asked.values())
        found = self.found[k][category] if category else sum(self.found[k].values())
        return found / asked if asked else 0.0

    def line(self, label: str) -> str:
        overall = "  ".join(f"top-{k} {self.share(k):6.1%}" for k in TOPS)
        by = "\n".join(
            f"      {CATEGORIES[c]:12} ({self.asked[c]:3}) "
            + "  ".join(f"top-{k} {self.share(k, c):6.1%}" for k in TOPS)
            for c in CATEGORIES
        )
        return f"  {label:30} {overall}\n{by}"


# -- the two baselines --------------------------------------------------------------

_WORD = re.compile(r"\w+")


def bm25_ranker(texts: Sequence[str]) -> Callable[[str], list[int]]:
    """Okapi BM25 (k1 1.2, b 0.75) over lower-cased words."""
    docs = [Counter(_WORD.findall(t.lower())) for t in texts]
    lengths = [sum(d.values()) for d in docs]
    mean = sum(lengths) / max(1, len(lengths))
    df: Counter[str] = Counter(w for d in docs for w in d)
    n = len(docs)

    def rank(question: str) -> list[int]:
        words = set(_WORD.findall(question.lower()))
        scores = np.zeros(n)
        for w in words:
            if w not in df:
                continue
            weight = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
            for i, d in enumerate(docs):
                f = d.get(w)
                if f:
                    scores[i] += weight * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * lengths[i] / mean))
        return [int(i) for i in np.argsort(-scores, kind="stable")[:LIMIT]]

    return rank


class Vectors:
    """The local model's raw vectors (before centring), cached on disk by text hash."""

    def __init__(self, cache: Path) -> None:
        from memjobs_worker.embedding.local import MODEL_ID, LocalEmbedder

        self.embedder = LocalEmbedder(threads=os.cpu_count() or 1)
        self.path = cache / (hashlib.sha256(MODEL_ID.encode()).hexdigest()[:16] + ".npz")
        cache.mkdir(parents=True, exist_ok=True)
        self.known: dict[str, np.ndarray] = {}
        if self.path.exists():
            with np.load(self.path) as stored:
                self.known = {k: stored[k] for k in stored.files}

    @staticmethod
    def key(text: str, query: bool) -> str:
        return hashlib.sha256(f"{'q' if query else 'p'}\0{text}".encode()).hexdigest()

    def raw(self, texts: Sequence[str], query: bool) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if self.key(t, query) not in self.known))
        for start in range(0, len(missing), 64):
            part = missing[start : start + 64]
            for text, vector in zip(part, self.embedder._raw(part, query), strict=True):
                self.known[self.key(text, query)] = np.asarray(vector, dtype=np.float32)
        if missing:
            np.savez(self.path, **self.known)  # type: ignore[arg-type]  # numpy's stub: **arrays
        return np.stack([self.known[self.key(t, query)] for t in texts])

    def centred(self, texts: Sequence[str], query: bool) -> np.ndarray:
        """What :class:`LocalEmbedder` returns (language centring, then unit length)."""
        from memjobs_worker.embedding.centering import language_of

        means = self.embedder._means_for()
        out = []
        for text, vector in zip(texts, self.raw(texts, query), strict=True):
            language = language_of(text)
            if language is not None:
                vector = vector - means[(query, language)]
            out.append(vector / (np.linalg.norm(vector) or 1.0))
        return np.stack(out)


def unit(m: np.ndarray) -> np.ndarray:
    return np.asarray(m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12))


def baselines(conversations: Sequence[Conversation], vectors: Vectors) -> tuple[Tally, Tally]:
    bm25, bare = Tally(), Tally()
    for c in conversations:
        texts = [t for _, t in c.turns]
        ids = [{d} for d, _ in c.turns]
        rank = bm25_ranker(texts)
        passages = unit(vectors.raw(texts, False))
        questions = unit(vectors.raw([q for q, _, _ in c.questions], True))
        for (question, category, evidence), qv in zip(c.questions, questions, strict=True):
            bm25.add(category, evidence, [ids[i] for i in rank(question)])
            top = np.argsort(-(passages @ qv), kind="stable")[:LIMIT]
            bare.add(category, evidence, [ids[int(i)] for i in top])
    return bm25, bare


# -- fast mode: the ranking code on precomputed candidates -----------------------------


@dataclass
class Asked:
    """One question's candidates, as the recall SQL returns them."""

    category: int
    evidence: set[str]
    memories: list[tuple[str, float]]  # every memory, in the order made, with its cosine
    keyword: dict[str, tuple[float, ...]]
    whole: float
    question: str = ""
    texts: list[str] = field(default_factory=list)  # the memories' texts, in their order


def fast_candidates(
    conversations: Sequence[Conversation], vectors: Vectors, workdir: Path
) -> dict[str, tuple[list[Asked], dict[str, str]]]:
    """Each conversation's questions with their candidates from the recall SQL
    (``similarities``, ``keyword_weights``), over a mem0-shaped table filled directly."""
    import psycopg
    from psycopg.types.json import Jsonb

    from memjobs_worker.embedded import EmbeddedPostgres
    from memjobs_worker.fulltext import index_tokens
    from memjobs_worker.memory.engine import fused_search as fs

    pg = EmbeddedPostgres(workdir / "pg")
    url = pg.start()
    out: dict[str, tuple[list[Asked], dict[str, str]]] = {}
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            conn.execute("CREATE TABLE memories (id uuid PRIMARY KEY, vector vector(384), payload jsonb)")
            for c in conversations:
                texts = [t for _, t in c.turns]
                passages = vectors.centred(texts, False)
                turn_of: dict[str, str] = {}
                with conn.cursor() as cur:
                    rows: list[tuple[str, str, Jsonb]] = []
                    for (dia_id, text), v in zip(c.turns, passages, strict=True):
                        memory_id = str(uuid.uuid4())
                        turn_of[memory_id] = dia_id
                        rows.append(
                            (
                                memory_id,
                                "[" + ",".join(map(str, v.tolist())) + "]",
                                Jsonb(
                                    {
                                        "data": text,
                                        "text_lemmatized": index_tokens(text),
                                        "user_id": c.name,
                                        "created_at": f"2000-01-01T00:00:00.{len(rows):06d}+00:00",
                                    }
                                ),
                            )
                        )
                    cur.executemany("INSERT INTO memories VALUES (%s, %s::vector, %s)", rows)
                questions = vectors.centred([q for q, _, _ in c.questions], True)
                asked = []
                for (question, category, evidence), qv in zip(c.questions, questions, strict=True):
                    near = fs.similarities(conn, "memories", c.name, qv.tolist())
                    held, whole = fs.keyword_weights(conn, "memories", c.name, question)
                    asked.append(
                        Asked(
                            category,
                            evidence,
                            [(h.memory_id, h.score or 0.0) for h in near],
                            held,
                            whole,
                            question,
                            [h.text for h in near],
                        )
                    )
                out[c.name] = (asked, turn_of)
    finally:
        pg.stop()
    return out


def fast_tally(
    candidates: dict[str, tuple[list[Asked], dict[str, str]]],
    names: Sequence[str],
    rank: Callable[..., list[tuple[str, float]]] | None = None,
    min_score: float = 0.1,
) -> Tally:
    from memjobs_worker.memory.engine.fused_search import rank_memories

    rank = rank or rank_memories
    tally = Tally()
    for name in names:
        asked, turn_of = candidates[name]
        for a in asked:
            ranked = rank(a.memories, a.keyword, a.whole, min_score, question=a.question, texts=a.texts)[:LIMIT]
            tally.add(a.category, a.evidence, [{turn_of[m]} for m, _ in ranked])
    return tally


def leave_one_out(candidates: dict[str, tuple[list[Asked], dict[str, str]]], names: Sequence[str]) -> None:
    """For each conversation, the ranking's weights chosen on the others (a grid around
    the defaults), then measured on it: does a choice made on some conversations hold
    on one it was not made on?"""
    import functools
    import itertools

    from memjobs_worker.memory.engine.fused_search import rank_memories

    grid = list(itertools.product((0.25, 0.5, 1.0), (0.3, 0.6, 1.0), (2, 3), (0.0, 0.15, 0.3), (0.0, 0.1)))
    found: dict[tuple[float, float, int, float, float], dict[str, tuple[int, int]]] = {}
    for choice in grid:
        rank = functools.partial(
            rank_memories,
            keyword_weight=choice[0],
            neighbour_weight=choice[1],
            neighbours=choice[2],
            speaker_weight=choice[3],
            date_weight=choice[4],
        )
        found[choice] = {}
        for name in names:
            tally = fast_tally(candidates, [name], rank)
            found[choice][name] = (sum(tally.found[5].values()), sum(tally.asked.values()))
    held_hits = held_asked = 0
    for name in names:
        others = [n for n in names if n != name]
        best = max(grid, key=lambda g: sum(found[g][n][0] for n in others) / sum(found[g][n][1] for n in others))
        hits, asked = found[best][name]
        held_hits, held_asked = held_hits + hits, held_asked + asked
        print(
            f"  held out {name}: weights chosen on the others (keyword, neighbour, neighbours, speaker, date) {best}, "
            f"top-5 on it {hits / asked:.1%}"
        )
    print(f"  leave-one-conversation-out top-5: {held_hits / held_asked:.1%}")


# -- full mode: memjobs as it runs -----------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def full(conversations: Sequence[Conversation], workdir: Path, threads: int) -> tuple[Tally, float, list[float]]:
    import psycopg

    from memjobs_client.contracts import owner_key
    from memjobs_worker.embedded import EmbeddedPostgres, EmbeddedRedis
    from memjobs_worker.settings import (
        DatabaseSettings,
        EmbeddingSettings,
        KnowledgeSettings,
        MetricsSettings,
        RedisSettings,
        Settings,
    )
    from tests.support.harness import Harness

    pg, redis_server = EmbeddedPostgres(workdir / "pg"), EmbeddedRedis(workdir / "redis")
    try:
        pg_url, redis_url = pg.start(), redis_server.start()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE locomo")
        settings = Settings(
            data_dir=workdir / "data",
            redis=RedisSettings(url=redis_url),
            database=DatabaseSettings(url=f"postgresql://postgres@127.0.0.1:{pg.port}/locomo"),
            metrics=MetricsSettings(mode="off"),
            knowledge=KnowledgeSettings(mode="off"),
            embedding=EmbeddingSettings(local_embedder="e5"),
        )
        h = Harness(settings)
        h.runtime.engine  # noqa: B018  (the engine and its model loaded before the clock)
        turns_of: dict[str, set[str]] = {}
        started = time.perf_counter()
        for c in conversations:
            for dia_id, text in c.turns:
                turns_of.setdefault(h.client.remember(f"locomo-{c.name}", text), set()).add(dia_id)
        h.start_worker(threads=threads)
        h.drain(timeout_s=24 * 3600)
        rate = sum(len(c.turns) for c in conversations) / (time.perf_counter() - started)
        h.stop_worker()
        tally, times = Tally(), []
        for c in conversations:
            key = owner_key(f"locomo-{c.name}")
            for question, category, evidence in c.questions:
                t0 = time.perf_counter()
                hits = h.runtime.personal_memory.recall(key, question, LIMIT)
                times.append((time.perf_counter() - t0) * 1000)
                tally.add(
                    category, evidence, [set().union(*(turns_of.get(s, set()) for s in hit.source_ids)) for hit in hits]
                )
        h.close()
        return tally, rate, times
    finally:
        redis_server.stop()
        pg.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data", type=Path, required=True, help=f"the directory of LoCoMo's conversation files ({PUBLISHED})"
    )
    parser.add_argument("--mode", choices=("full", "fast"), default="full")
    parser.add_argument(
        "--loco", action="store_true", help="fast mode: check the ranking's weights by leave-one-conversation-out"
    )
    parser.add_argument("--only", nargs="*", help="conversation file names (stems) to use")
    parser.add_argument("--threads", type=int, default=4, help="worker threads (full mode)")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "memjobs-locomo-e5",
        help="where the model's vectors of turns and questions are kept",
    )
    args = parser.parse_args()
    print(f"# {PUBLISHED}; load average {os.getloadavg()[0]:.1f}")
    conversations = [c for c in load(args.data) if not args.only or c.name in args.only]
    print(
        f"# {len(conversations)} conversations, {sum(len(c.turns) for c in conversations)} turns, "
        f"{sum(len(c.questions) for c in conversations)} questions of categories 1-4"
    )
    vectors = Vectors(args.cache)
    workdir = Path(tempfile.mkdtemp(prefix="memjobs-locomo-"))
    try:
        bm25, bare = baselines(conversations, vectors)
        if args.mode == "fast":
            candidates = fast_candidates(conversations, vectors, workdir)
            print(fast_tally(candidates, [c.name for c in conversations]).line("memjobs ranking (fast)"))
            if args.loco:
                leave_one_out(candidates, [c.name for c in conversations])
        else:
            tally, rate, times = full(conversations, workdir, args.threads)
            print(tally.line("memjobs recall"))
        print(bm25.line("BM25 over the same turns"))
        print(bare.line("e5 alone (no centring/fusion)"))
        if args.mode == "full":
            print(
                f"  learned {rate:.1f} sources/s; recall p50 {percentile(times, 0.5):.0f} ms, "
                f"p95 {percentile(times, 0.95):.0f} ms (mean {statistics.mean(times):.0f} ms)"
            )
        print(f"# load average at the end {os.getloadavg()[0]:.1f}")
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
