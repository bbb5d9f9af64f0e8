"""Redis's errors and bytes meet memjobs in one module, memjobs_client/redis_seam.py
(issue 37): a handler naming a redis-py error, or a ``x.decode() if isinstance(x,
bytes) else …`` copy, anywhere else fails here. The few handlers that mean
something else than "Redis did not answer" are listed below by place, with why."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from tests.support.harness import REPO

SEAM = "producers/memjobs_client/redis_seam.py"

#: Handlers naming a redis-py error allowed outside the seam: (file, handled types) → how many.
ALLOWED: dict[tuple[str, str], int] = {
    # Dramatiq's consumer contract: a lost connection is its ConnectionClosed (the
    # consumer's audit of what it holds, its requeue and its put-back on close).
    ("workers/memjobs_worker/broker.py", "(redis.ConnectionError, redis.TimeoutError)"): 3,
    # The same for an acknowledgement, as Dramatiq's own ack raises it (grouped acks).
    ("workers/memjobs_worker/broker.py", "redis.ConnectionError"): 1,
    # A worker thread's retry is moved again until Redis takes it (broker.enqueue).
    ("workers/memjobs_worker/broker.py", "(redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError)"): 1,
    # The allow-oom dispatch: a Redis < 7 refusing script flags goes the stock way.
    ("workers/memjobs_worker/broker.py", "redis.ResponseError"): 1,
    # WAITAOF unknown to a Redis < 7.2: the durability wait falls back to WAIT.
    ("producers/memjobs_client/connect.py", "redis.ResponseError"): 1,
}


def _sources() -> list[Path]:
    return sorted(p for root in ("producers", "workers") for p in (REPO / root).rglob("*.py"))


def _names_redis(node: ast.expr | None) -> bool:
    return node is not None and any(
        isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "redis" for n in ast.walk(node)
    )


def _redis_handlers(tree: ast.AST) -> list[str]:
    return [
        ast.unparse(node.type)
        for node in ast.walk(tree)
        if isinstance(node, ast.ExceptHandler) and node.type is not None and _names_redis(node.type)
    ]


def _decode_copies(tree: ast.AST) -> list[int]:
    """Lines of ``… if isinstance(x, bytes) else …`` (a reply decoded or encoded by hand)."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.IfExp)
        and isinstance(node.test, ast.Call)
        and isinstance(node.test.func, ast.Name)
        and node.test.func.id == "isinstance"
        and len(node.test.args) == 2
        and isinstance(node.test.args[1], ast.Name)
        and node.test.args[1].id == "bytes"
    ]


def test_redis_errors_are_handled_in_the_seam_only() -> None:
    found: Counter[tuple[str, str]] = Counter()
    for path in _sources():
        rel = path.relative_to(REPO).as_posix()
        if rel == SEAM:
            continue
        for handled in _redis_handlers(ast.parse(path.read_text(), rel)):
            found[(rel, handled)] += 1
    stray = {place: n for place, n in found.items() if n > ALLOWED.get(place, 0)}
    assert not stray, f"handle Redis's errors through memjobs_client.redis_seam, not here: {stray}"
    gone = {place for place in ALLOWED if place not in found}
    assert not gone, f"no longer there: drop them from ALLOWED: {gone}"


def test_redis_replies_are_decoded_in_the_seam_only() -> None:
    copies = {
        rel: lines
        for path in _sources()
        if (rel := path.relative_to(REPO).as_posix()) != SEAM
        and (lines := _decode_copies(ast.parse(path.read_text(), rel)))
    }
    assert not copies, f"use memjobs_client.redis_seam.as_str / as_bytes: {copies}"


def test_the_check_sees_what_it_forbids() -> None:
    tree = ast.parse(
        "try:\n    pass\nexcept (redis.RedisError, OSError):\n    pass\n"
        "x = raw.decode() if isinstance(raw, bytes) else str(raw)\n"
    )
    assert _redis_handlers(tree) == ["(redis.RedisError, OSError)"]
    assert _decode_copies(tree) == [5]
