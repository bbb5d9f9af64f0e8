"""Problems name what is wrong in the caller's terms: a header by its name, a
query parameter by its name, a body field by its path; never pydantic's
``*: Field required`` for a header nobody can find in the request."""

from __future__ import annotations

from collections.abc import Callable

from tests.support.http import Api, problem


def test_a_missing_owner_header_is_named(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    body = problem(api.get("/v1/sources"), "validation", 422)
    assert body["detail"] == "X-Memjobs-Owner header is required"


def test_a_query_parameter_out_of_range_is_named(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    body = problem(api.get("/v1/sessions?days=-1", owner="alice"), "validation", 422)
    assert body["detail"].startswith("query parameter days: "), body["detail"]


def test_a_missing_body_field_is_named_and_required(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    body = problem(api.post("/v1/remember", {"text": "I drink green tea"}), "validation", 422)
    assert body["detail"] == "owner_id is required"
