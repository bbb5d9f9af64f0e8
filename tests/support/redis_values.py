"""Values as the tests' Redis clients return them: bytes, since none of them sets
``decode_responses`` (redis-py types every reply ``bytes | str`` whichever it is)."""

from __future__ import annotations


def as_bytes(value: object) -> bytes:
    """A value read from Redis, as the bytes it is."""
    assert isinstance(value, bytes), f"expected bytes from Redis, got {type(value).__name__}"
    return value
