"""Soak: the many-host scenario of tests/faults/test_many_hosts.py, bigger and repeated.

Network namespaces (root only), Redis with Sentinel and PostgreSQL in their own
namespaces, three worker hosts; each round kills a host, partitions another
from Redis mid-extraction, fails the Redis master over, forgets some sources,
and checks every invariant. Prints each round's time from the last fault to
the last source learned.

    sudo .venv/bin/python bench/soak_many_hosts.py [--owners 200] [--per-owner 25] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import tests.faults.test_many_hosts as scenario  # noqa: E402
from tests.support.netns import netns_unavailable  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--owners", type=int, default=200)
    parser.add_argument("--per-owner", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    reason = netns_unavailable()
    if reason:
        print(f"soak skipped: {reason}")
        return 1
    scenario.OWNERS, scenario.PER_OWNER = args.owners, args.per_owner
    scenario.FORGET = min(scenario.FORGET, args.owners)
    for round_no in range(1, args.rounds + 1):
        started = time.monotonic()
        scenario.test_many_hosts_survive_kill_partition_and_failover()
        print(
            f"round {round_no}: {args.owners * args.per_owner} sources, all invariants held, "
            f"{time.monotonic() - started:.0f} s in all"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
