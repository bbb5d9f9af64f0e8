"""The Redis seam (memjobs_client.redis_seam): redis-py's errors become memjobs's,
or are kept for a best-effort caller; replies are decoded in one way. No server."""

from __future__ import annotations

import pytest
import redis

from memjobs_client.errors import BackendUnavailable, MemjobsError, RedisFull
from memjobs_client.redis_seam import as_bytes, as_str, redis_best_effort, redis_errors


def test_a_redis_error_is_backend_unavailable_saying_redis_did_not_answer() -> None:
    cause = redis.ConnectionError("Connection refused")
    with pytest.raises(BackendUnavailable) as caught, redis_errors():
        raise cause
    assert str(caught.value) == "Redis did not answer: Connection refused"
    assert caught.value.reason == "backend_unavailable"
    assert caught.value.__cause__ is cause


def test_the_caller_names_what_did_not_happen() -> None:
    expected = r"^Redis did not pause learn: Timeout reading$"
    with pytest.raises(BackendUnavailable, match=expected), redis_errors("Redis did not pause learn"):
        raise redis.TimeoutError("Timeout reading")


def test_translate_makes_the_callers_own_error() -> None:
    def refused(exc: redis.RedisError) -> MemjobsError:
        return RedisFull("full") if isinstance(exc, redis.OutOfMemoryError) else BackendUnavailable("down")

    with pytest.raises(RedisFull), redis_errors(translate=refused):
        raise redis.OutOfMemoryError("OOM command not allowed")
    with pytest.raises(BackendUnavailable, match="^down$"), redis_errors(translate=refused):
        raise redis.ConnectionError("gone")


def test_other_errors_and_returns_pass_through() -> None:
    with pytest.raises(ValueError, match="not Redis's"), redis_errors():
        raise ValueError("not Redis's")

    def answer() -> int:
        with redis_errors():
            return 7

    assert answer() == 7


def test_best_effort_keeps_the_redis_error_and_runs_on() -> None:
    cause = redis.ConnectionError("gone")
    with redis_best_effort() as attempt:
        raise cause
    assert attempt.failed and attempt.error is cause

    with redis_best_effort() as attempt:
        pass
    assert not attempt.failed and attempt.error is None

    with pytest.raises(KeyError), redis_best_effort():
        raise KeyError("not Redis's")


def test_best_effort_returns_from_the_block_or_falls_to_a_default() -> None:
    def ping(fail: bool) -> bool:
        with redis_best_effort():
            if fail:
                raise redis.ConnectionError("gone")
            return True
        return False

    assert ping(False) is True
    assert ping(True) is False


def test_replies_as_text_and_bytes() -> None:
    assert as_str(b"caf\xc3\xa9") == "café"
    assert as_str("café") == "café"
    assert as_str(42) == "42"
    assert as_bytes(b"\x00raw") == b"\x00raw"
    assert as_bytes("café") == "café".encode()
    assert as_bytes(7) == b"7"
