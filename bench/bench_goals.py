"""Every figure of the "lean on a laptop, fast under load" goals in one run,
each set against its goal.

Runs, one after the other on this machine, the three benchmarks that measure
them and reads their output:

  bench_load.py       remember while a backlog extracts against a stock Dramatiq
                      no-op, chat calls per source (backlog and steady), the
                      steady load's latencies, learned/s against mem0 inline,
                      the CPU milliseconds per learned source; then the
                      backlog again with every pool in one process
                      (``--layout shared``, a small host's default);
  bench_footprint.py  the embedded default's resident memory, idle and busy;
  bench_embeddings.py concurrent recall with the local model.

Each benchmark's own output is printed as it runs; the table at the end is
read from it. A figure its benchmark did not print (it failed, or its output
changed) is shown as "missing" and the script exits 1.

    python bench/bench_goals.py [--steady-seconds 60] [--idle 25]
"""

from __future__ import annotations

import argparse
import operator
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent

#: A float, as the benchmarks print them.
NUM = r"([0-9]+(?:\.[0-9]+)?)"


@dataclass(frozen=True)
class Goal:
    figure: str
    pattern: str  # its first group is the figure, read from the benchmark's output
    meets: Callable[[float, float], bool]
    bound: float
    unit: str


AT_LEAST, AT_MOST = operator.ge, operator.le

LOAD = [
    Goal(
        "remember while a backlog extracts, x a stock Dramatiq no-op",
        rf"remember\s+{NUM}/s while extracting \({NUM}x the stock",
        AT_LEAST,
        0.5,
        "x",
    ),
    Goal("chat calls per source, backlog", rf"model on : .*?, {NUM} chat calls/source", AT_MOST, 0.10, ""),
    Goal("learned/s against mem0 inline", rf"memjobs/inline = {NUM}x", AT_LEAST, 10.0, "x"),
    Goal("steady: chat calls per source", rf"steady .*?; {NUM} chat calls/source", AT_MOST, 0.15, ""),
    Goal("steady: ledger p99", rf"steady .*?ledger p50 {NUM} s, p99 {NUM} s", AT_MOST, 0.25, "s"),
    Goal("steady: learned p95", rf"steady .*?learned p50 {NUM} s, p95 {NUM} s", AT_MOST, 8.0, "s"),
]
#: The same remember figure with every pool in one process (``--layout shared``),
#: as a host with at most 4 cores or 8 GiB runs them by default.
SHARED = [
    Goal(
        "the same, pools in one process (a small host's default)",
        rf"remember\s+{NUM}/s while extracting \({NUM}x the stock",
        AT_LEAST,
        0.5,
        "x",
    ),
]
FOOTPRINT = [
    Goal(
        "idle embedded stack after first use, MB RSS", rf"idle after one source .*?: {NUM} MB RSS", AT_MOST, 400, "MB"
    ),
]
RECALL = [
    Goal(
        "8 concurrent recalls of one owner, p50 ms",
        rf"spread, default\)\s+8 caller\(s\), 1 owner\(s\): p50\s+{NUM}",
        AT_MOST,
        40,
        "ms",
    ),
    Goal(
        "8 concurrent recalls of 8 owners, p50 ms",
        rf"spread, default\)\s+8 caller\(s\), 8 owner\(s\): p50\s+{NUM}",
        AT_MOST,
        40,
        "ms",
    ),
]


def run(script: str, *args: str) -> str:
    """Runs ``script`` with this interpreter, echoing its output; returns it."""
    print(f"== {script} {' '.join(args)}", flush=True)
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    print(proc.stdout, flush=True)
    if proc.returncode:
        print(f"{script} exited {proc.returncode}", flush=True)
    return proc.stdout


def read(goal: Goal, output: str) -> float | None:
    found = re.search(goal.pattern, output)
    if found is None:
        return None
    # The figure is the pattern's last group: "ledger p50 X s, p99 Y s" reads Y.
    return float(found.groups()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steady-seconds", type=int, default=60, help="the steady load's length (bench_load)")
    parser.add_argument("--idle", type=float, default=25.0, help="seconds without work before an idle reading")
    args = parser.parse_args()

    outputs = [
        (LOAD, run("bench_load.py", "--scaling", "", "--seconds", str(args.steady_seconds))),
        (SHARED, run("bench_load.py", "--only-backlog", "--layout", "shared")),
        (FOOTPRINT, run("bench_footprint.py", "--idle", str(args.idle))),
        (RECALL, run("bench_embeddings.py", "--latency-only")),
    ]
    print("== every goal, from the runs above")
    missing = 0
    for goals, output in outputs:
        for goal in goals:
            value = read(goal, output)
            if value is None:
                missing += 1
                print(f"  {goal.figure:<62} missing")
                continue
            sign = ">=" if goal.meets is AT_LEAST else "<="
            verdict = "met" if goal.meets(value, goal.bound) else "NOT met"
            print(f"  {goal.figure:<62} {value:>8g} {goal.unit:<2}  goal {sign} {goal.bound:g}: {verdict}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
