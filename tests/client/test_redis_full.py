"""The producer's high-water mark (MemoryGuard) and the schema version a payload
says it was written in, without a server (the real Redis at its limit:
tests/faults/test_redis_oom.py)."""

from __future__ import annotations

from typing import Any

import pytest

from memjobs_client.connect import MemoryGuard
from memjobs_client.contracts import ExtractFacts
from memjobs_client.contracts.base import schema_version_of
from memjobs_client.errors import InvalidPayload, RedisFull
from memjobs_client.validation import validate

KEY = "a" * 64


class FakeRedis:
    """Answers INFO memory with what the test sets, counting the calls."""

    def __init__(self, used: int, maxmemory: int) -> None:
        self.used, self.maxmemory, self.calls = used, maxmemory, 0

    def info(self, section: str) -> dict[str, Any]:
        assert section == "memory"
        self.calls += 1
        return {"used_memory": self.used, "maxmemory": self.maxmemory}


def test_the_guard_refuses_at_the_mark_and_takes_again_below_it() -> None:
    r = FakeRedis(used=899, maxmemory=1000)
    guard = MemoryGuard(0.9, refresh_s=0)
    guard.check(r)  # type: ignore[arg-type]
    r.used = 900
    with pytest.raises(RedisFull) as info:
        guard.check(r)  # type: ignore[arg-type]
    assert info.value.reason == "redis_full" and "new jobs stop at 90%" in str(info.value)
    r.used = 500
    guard.check(r)  # type: ignore[arg-type]


def test_the_guard_reads_redis_at_most_once_per_refresh() -> None:
    r = FakeRedis(used=950, maxmemory=1000)
    guard = MemoryGuard(0.9, refresh_s=3600)
    for _ in range(5):
        with pytest.raises(RedisFull):
            guard.check(r)  # type: ignore[arg-type]
    assert r.calls == 1


@pytest.mark.parametrize(("high_water", "maxmemory"), [(0.9, 0), (1.0, 1000)])
def test_no_maxmemory_or_a_mark_of_one_never_refuses(high_water: float, maxmemory: int) -> None:
    r = FakeRedis(used=10**9, maxmemory=maxmemory)
    MemoryGuard(high_water, refresh_s=0).check(r)  # type: ignore[arg-type]


@pytest.mark.parametrize("high_water", [0, -0.5, 1.5])
def test_a_mark_outside_zero_to_one_is_refused(high_water: float) -> None:
    with pytest.raises(ValueError, match="high_water"):
        MemoryGuard(high_water)


@pytest.mark.parametrize(
    ("payload", "version"),
    [
        ({"owner_key": KEY}, 1),  # written before versions travelled
        ({"schema_version": 1}, 1),
        ({"schema_version": 7}, 7),
        ({"schema_version": 0}, None),
        ({"schema_version": "2"}, None),
        ({"schema_version": True}, None),
        ("not a payload", None),
    ],
)
def test_the_version_a_payload_says(payload: Any, version: int | None) -> None:
    assert schema_version_of(payload) == version


def test_payloads_are_written_in_the_current_version_and_read_from_older_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    import memjobs_client.contracts.base as base

    assert validate(ExtractFacts, {"owner_key": KEY, "trigger": "remember"}).schema_version == 1
    with pytest.raises(InvalidPayload, match="schema version 2 is not one this code reads"):
        validate(ExtractFacts, {"schema_version": 2, "owner_key": KEY, "trigger": "remember"})
    monkeypatch.setattr(base, "SCHEMA_VERSION", 2)  # a newer release
    assert validate(ExtractFacts, {"owner_key": KEY, "trigger": "remember"}).schema_version == 2
    assert validate(ExtractFacts, {"schema_version": 1, "owner_key": KEY, "trigger": "remember"}).schema_version == 1
