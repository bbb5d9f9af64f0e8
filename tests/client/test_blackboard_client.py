"""The producer's SessionBlackboard without a server: an append is cut into
messages of at most 100 entries and about 512 KiB, every entry checked before
any is sent; restores speak HTTPS or loopback HTTP only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memjobs_client import MemjobsClient, SessionBlackboard
from memjobs_client.errors import ConfigurationError, InvalidPayload, SensitiveContent


@pytest.fixture
def board() -> Iterator[SessionBlackboard]:
    client = MemjobsClient("redis://127.0.0.1:9/0")  # never connected: nothing is sent here
    yield SessionBlackboard(client)
    client.close()


def entry(seq: int, result: str = "ok") -> dict[str, object]:
    return {"entry_id": f"e-{seq}", "seq": seq, "at": "2026-12-04T10:00:00Z", "trust": "runtime", "result": result}


def test_an_append_is_cut_by_count_and_by_bytes_in_order(board: SessionBlackboard) -> None:
    small = board.payloads("o", "s", [entry(i) for i in range(250)])
    assert [len(p["entries"]) for p in small] == [100, 100, 50]
    big = board.payloads("o", "s", [entry(i, "x" * 60_000) for i in range(20)])
    assert [len(p["entries"]) for p in big] == [8, 8, 4]
    assert [e["seq"] for p in big for e in p["entries"]] == list(range(20))


def test_one_bad_entry_refuses_the_whole_append(board: SessionBlackboard) -> None:
    with pytest.raises(SensitiveContent):
        board.payloads("o", "s", [entry(i) for i in range(150)] + [entry(150, "my password is hunter2!")])
    with pytest.raises(InvalidPayload):
        board.payloads("o", "s", [{**entry(1), "at": "2026-12-04T10:00:00"}])  # no timezone
    with pytest.raises(InvalidPayload):
        board.payloads("o", "s", [])


@pytest.mark.parametrize("url", ["http://memjobs.internal", "ftp://127.0.0.1", "http://10.0.0.1:8780"])
def test_a_restore_url_must_be_https_or_loopback(url: str) -> None:
    client = MemjobsClient("redis://127.0.0.1:9/0")
    try:
        with pytest.raises(ConfigurationError):
            SessionBlackboard(client, api_url=url)
        assert SessionBlackboard(client, api_url="http://127.0.0.1:8780/").api_url == "http://127.0.0.1:8780"
    finally:
        client.close()
