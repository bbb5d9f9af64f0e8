"""The caps of issue 31, item 1, at the HTTP door (the API served in process):
each refusal names its cap and setting, and comes before the work it bounds."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from memjobs_worker.http.routes import sessions
from tests.support.http import Api, problem, turn


@pytest.fixture
def api(api_factory: Callable[..., Api]) -> Api:
    return api_factory(worker=False, api_max_query_chars=50)


def test_a_transcript_over_the_cap_is_refused_before_any_scan(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    scanned: list[str] = []

    def scan(text: str) -> str:
        scanned.append(text)
        return text

    monkeypatch.setattr(sessions, "redact_secrets", scan)
    huge = {"owner_id": "mallory", "transcript": [turn("card " + "4 " * 120000)] * 4}
    body = problem(api.post("/v1/sessions/x/end", huge), "validation", 422)
    assert body["detail"] == ("transcript: 960020 bytes, over the limit of 262144 bytes (MEMJOBS_MAX_TRANSCRIPT_BYTES)")
    assert scanned == []
    assert api.post("/v1/sessions/x/end", {"owner_id": "alice", "transcript": [turn("hi")]}).status_code == 202
    assert scanned == ["hi"]


@pytest.mark.parametrize("path", ["/v1/recall", "/v1/knowledge/search"])
def test_a_query_over_the_cap_is_refused_naming_it(api: Api, path: str) -> None:
    body = problem(api.post(path, {"owner_id": "alice", "query": "tea " * 13}), "validation", 422)
    assert body["detail"] == ("query: 52 characters, over the limit of 50 characters (MEMJOBS_API_MAX_QUERY_CHARS)")
    assert api.post(path, {"owner_id": "alice", "query": "t" * 50}).status_code == 200
