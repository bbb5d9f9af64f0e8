"""What a `memjobs` command costs to start, against importing the light client.

Runs each command as a user runs it (a new `python -m memjobs_worker.cli.main`
process), `--repeat` times alternating, against its own embedded Redis and
PostgreSQL (started here, not timed), and prints the median wall time of each
beside the median of `python -c "import memjobs_client"` and their ratio:

    .venv/bin/python bench/bench_cli_startup.py [--repeat 5] [--tree DIR]

``--tree`` measures another revision's CLI instead (its ``workers/`` and
``producers/`` first on the path), e.g. ``git archive REV | tar -x -C DIR``.

The ratio is the figure (absolute times on these 2-core machines drift with
their load). `forget` decides at once on the ledger, so it also opens the
state database (SQLAlchemy, psycopg).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.bench_env import Scratch  # noqa: E402

BASELINE = "import memjobs_client"


def commands(transcript: Path) -> dict[str, list[str]]:
    owner = f"bench-{uuid.uuid4().hex[:8]}"
    return {
        "--help": ["--help"],
        "remember": ["remember", "--owner", owner, "--text", "I drink green tea every morning"],
        "forget": ["forget", "--owner", owner, "--source", "src_" + "0" * 32],
        "end-session": [
            "end-session",
            "--owner",
            owner,
            "--session",
            uuid.uuid4().hex,
            "--transcript",
            str(transcript),
        ],
        "task": ["task", "--owner", owner, "--task", "t1", "--goal", "water the plants", "--status", "running"],
    }


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 6):  # forget of an unknown source: not_found, exit 6
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-500:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each (the median is shown)")
    parser.add_argument(
        "--tree", type=Path, default=None, help="another revision's tree to measure (default: this one)"
    )
    args = parser.parse_args()

    with Scratch("cli") as scratch:
        workdir = scratch.dir
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMJOBS_", "QWEN_"))}
        env.update(
            MEMJOBS_REDIS_URL=scratch.redis().url,
            MEMJOBS_DATABASE_URL=scratch.postgres().url,
            MEMJOBS_DATA_DIR=str(workdir / "data"),
            MEM0_TELEMETRY="False",
            PYTHONPATH=str(REPO),
        )
        if args.tree is not None:
            tree = args.tree.resolve()
            env["PYTHONPATH"] = os.pathsep.join([str(tree / "workers"), str(tree / "producers"), str(REPO)])
        transcript = workdir / "transcript.json"
        transcript.write_text(json.dumps([{"role": "user", "text": "hello", "ts": 1.0}]))
        cli = [sys.executable, "-m", "memjobs_worker.cli.main"]
        timed(cli + ["forget", "--owner", "warm", "--source", "src_" + "0" * 32], env)  # migrations
        runs: dict[str, list[float]] = {}
        for _ in range(args.repeat):  # alternating: the machine's drift hits every row alike
            runs.setdefault(BASELINE, []).append(timed([sys.executable, "-c", BASELINE], env))
            for name, words in commands(transcript).items():
                runs.setdefault(f"memjobs {name}", []).append(timed(cli + words, env))
        base = statistics.median(runs[BASELINE])
        print(f"memjobs CLI start-up: median of {args.repeat} runs, {os.cpu_count()} CPUs\n")
        print("| command | median (s) | runs (s) | × import memjobs_client |")
        print("|---|---|---|---|")
        for name, times in runs.items():
            median = statistics.median(times)
            shown = " / ".join(f"{t:.2f}" for t in times)
            print(f"| `{name}` | {median:.2f} | {shown} | {median / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
