"""The OpenAPI document: the committed copy is the generated one, the served one
is the same, and a bounded schemathesis run against a live API (real Redis,
PostgreSQL and worker) finds no 5xx and no response that breaks the document."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from memjobs_worker.http.openapi import document, render
from tests.support.harness import REPO
from tests.support.http import GATEWAY_TOKEN, HOST_TOKEN, Api

COMMITTED = REPO / "docs" / "openapi.json"
#: The whole schemathesis run stays under this (the issue asks for a bounded run).
BUDGET_S = 45.0
EXAMPLES_PER_OPERATION = 30


def test_committed_document_is_the_generated_one() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == render(), (
        "docs/openapi.json is stale: python -m memjobs_worker.http.openapi > docs/openapi.json"
    )


def test_served_document_is_the_committed_one(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    assert api.get("/openapi.json").json() == json.loads(COMMITTED.read_text(encoding="utf-8"))


def test_document_names_every_route_its_problems_and_its_security() -> None:
    doc = document()
    assert set(doc["paths"]) == {
        "/v1/remember",
        "/v1/forget",
        "/v1/recall",
        "/v1/preferences",
        "/v1/sessions/{session_id}/end",
        "/v1/sessions",
        "/v1/tasks/{task_id}",
        "/v1/knowledge/reindex",
        "/v1/knowledge/search",
        "/v1/sources",
        "/v1/memories",
        "/healthz",
        "/readyz",
        "/metrics",
        "/v1/ops/dead-letters",
        "/v1/ops/dead-letters/retry",
        "/v1/ops/dead-letters/purge",
        "/v1/ops/dead-letters/{letter_id}",
        "/v1/ops/dead-letters/{letter_id}/retry",
        "/v1/memory/documents",
        "/v1/memory/documents/{doc}",
        "/v1/memory/edits",
        "/v1/ops/memory-audit",
        "/v1/sessions/{session_id}/blackboard",
        "/v1/owners",
        "/v1/owners/export",
    }
    for path, methods in doc["paths"].items():
        for operation in methods.values():
            if path.startswith("/v1/"):
                assert operation["security"] == [{"bearer": []}]
                assert "application/problem+json" in operation["responses"]["401"]["content"]
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")):
                    assert list(response["content"]) == ["application/problem+json"]


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
def test_schemathesis_finds_no_server_error_and_no_response_off_schema(api_factory: Callable[..., Api]) -> None:
    api = api_factory(api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    schema = schemathesis.openapi.from_dict(json.loads(COMMITTED.read_text(encoding="utf-8")))
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    deadline = time.monotonic() + BUDGET_S
    calls: dict[str, int] = {}
    statuses: set[int] = set()

    def run(case: Any) -> None:
        if time.monotonic() > deadline:
            return
        response = case.call(base_url=api.url, headers={"Authorization": f"Bearer {HOST_TOKEN}"})
        statuses.add(response.status_code)
        calls[case.operation.label] = calls.get(case.operation.label, 0) + 1
        case.validate_response(response, checks=checks)

    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result.err()  # the app's own schema: every operation is valid
        operations.append(result.ok())
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode)
            test = settings(
                max_examples=EXAMPLES_PER_OPERATION // 2,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                derandomize=True,
            )(given(strategy)(run))
            try:
                test()
            except Unsatisfiable:
                # Nothing to make invalid (no parameters, no body): positive cases only.
                assert mode == GenerationMode.NEGATIVE, operation.label
    assert time.monotonic() < deadline + 35, "the run outlasted its budget"
    assert len(calls) == len(operations), f"operations never called: {calls}"
    assert 200 in statuses and 202 in statuses and 422 in statuses, statuses
