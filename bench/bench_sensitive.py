"""Sensitive-content figures: the labelled corpus, and what the check costs.

Prints, from one run:
  1. refusals on tests/corpus/ (credential lines refused, ordinary lines refused),
     by family for the credential lines;
  2. microseconds per call of find_sensitive_text on a short utterance, a
     32 KiB source (the default byte cap) and a 256 KiB transcript;
  3. microseconds per log record through the JSON Lines formatter (which runs
     the same detector over every string): a repeated INFO line, a line with a
     fresh id each time, and a record with an exception;
  4. CPU seconds of the inputs of issue 31's finding, and CPU seconds a
     megabyte of each input aimed at a detector's hot path and of each text of
     secrets (tests/security/test_detector_cost.py, a quarter megabyte each,
     least of three runs) for each input kind (a check, a redaction, machine
     text, a session's four turns, a memory document), with the costliest of
     each kind (issue 31: under 1 s a megabyte, every kind).

    python bench/bench_sensitive.py
"""

from __future__ import annotations

import logging
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from memjobs_client.sensitive import find_sensitive_text, redact_secrets  # noqa: E402
from memjobs_worker.logs import JsonFormatter  # noqa: E402
from tests.security.test_detector_cost import DENSE_SECRETS, HOT_PATHS, KINDS, MB, SIZE  # noqa: E402
from tests.support.sensitive_corpus import negatives, positives  # noqa: E402


def per_call_us(fn: Callable[[], object], repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - started) / repeat * 1e6


def record(msg: str, *args: object, exc: bool = False, **extra: object) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("could not connect to postgres://app:s3cret-pw@db/app")
        except ValueError:
            exc_info = sys.exc_info()
    rec = logging.LogRecord("memjobs.jobs", logging.INFO, __file__, 1, msg, args, exc_info)
    rec.__dict__.update(extra)
    return rec


def main() -> None:
    rows = positives()
    missed = Counter(family for family, _, text in rows if find_sensitive_text(text) is None)
    families = Counter(family for family, _, _ in rows)
    lines = negatives()
    refused = sum(1 for line in lines if find_sensitive_text(line) is not None)
    print(
        f"credential lines refused: {len(rows) - sum(missed.values())}/{len(rows)} "
        f"({len(families)} families; missed by family: {dict(missed) or 'none'})"
    )
    print(f"ordinary lines refused:   {refused}/{len(lines)} ({100 * refused / len(lines):.1f} %)")

    short = "remind me to buy green tea and call mom at seven tomorrow"
    source = ("我住在杭州，每天早上七点跑步，喜欢喝龙井茶。I walk the dog at seven. " * 400)[: 32 * 1024 // 2]
    transcript = source * 8
    for name, text, repeat in (
        ("short utterance", short, 2000),
        ("32 KiB source", source, 20),
        ("256 KiB transcript", transcript, 3),
    ):
        print(
            f"find_sensitive_text, {name} ({len(text.encode())} bytes): "
            f"{per_call_us(lambda t=text: find_sensitive_text(t), repeat):,.0f} µs"  # type: ignore[misc]
        )

    formatter = JsonFormatter()
    done = record("job done", actor="remember_source", outcome="created", message_id="m-1")
    print(f"log record, repeated INFO line: {per_call_us(lambda: formatter.format(done), 2000):,.0f} µs")

    def fresh() -> str:
        return formatter.format(record("job done", message_id=str(uuid.uuid4()), owner_key=uuid.uuid4().hex * 2))

    print(f"log record, fresh ids each time: {per_call_us(fresh, 2000):,.0f} µs")
    failed = record("job failed", exc=True, actor="reindex_knowledge", reason="backend_unavailable")
    print(f"log record with an exception: {per_call_us(lambda: formatter.format(failed), 500):,.0f} µs")

    turn = "card " + "4 " * 120000
    for name, text in (
        ("the finding's turn, 'card ' + '4 ' * 120000", turn),
        ("'card ' + '4 ' * 50000", "card " + "4 " * 50000),
        ("'pw=' * 21846", "pw=" * 21846),
    ):
        print(
            f"{name} ({len(text.encode()):,} bytes): check {cpu_s(find_sensitive_text, text):.2f} s, "
            f"redaction {cpu_s(redact_secrets, text):.2f} s"
        )
    inputs = HOT_PATHS + [(name, build(SIZE)) for name, build in DENSE_SECRETS.items() if name not in dict(HOT_PATHS)]
    print(f"CPU s a megabyte, {SIZE // 1024} KiB each, least of three runs: " + ", ".join(KINDS))
    worst = dict.fromkeys(KINDS, (0.0, ""))
    for name, text in inputs:
        megabytes = len(text.encode()) / MB
        figures = {kind: min(cpu_s(fn, text) for _ in range(3)) / megabytes for kind, fn in KINDS.items()}
        worst = {kind: max(worst[kind], (figures[kind], name)) for kind in KINDS}
        print(f"  {name}: " + " ".join(f"{figures[kind]:.2f}" for kind in KINDS))
    print("costliest: " + ", ".join(f"{kind} {worst[kind][0]:.2f} ({worst[kind][1]})" for kind in KINDS))


def cpu_s(fn: Callable[[str], object], text: str) -> float:
    """CPU seconds of one call (other work on the machine does not count)."""
    started = time.process_time()
    fn(text)
    return time.process_time() - started


if __name__ == "__main__":
    main()
