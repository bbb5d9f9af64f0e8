"""``DELETE /v1/owners`` and ``GET /v1/owners/export``: the host token only, the
owner in ``X-Memjobs-Owner`` (never in the URL)."""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import quote

from tests.lifecycle.conftest import plant
from tests.support.http import GATEWAY_TOKEN, HOST_TOKEN, Api


def test_an_operator_exports_then_erases_an_owner_over_http(api_factory: Callable[..., Api]) -> None:
    api = api_factory(api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    alice = plant(api.harness, "alice@example.com", "Qalicetag")
    bob = plant(api.harness, "bob@example.com", "Qbobtag")
    api.harness.drain()
    owner = {"X-Memjobs-Owner": quote(alice.owner, safe="")}

    refused = [
        api.http.get("/v1/owners/export", headers={**api.auth(GATEWAY_TOKEN), **owner}),
        api.http.delete("/v1/owners", headers={**api.auth(GATEWAY_TOKEN), **owner}),
    ]
    assert [(r.status_code, r.json()["reason"]) for r in refused] == [(403, "forbidden")] * 2
    nameless = api.http.delete("/v1/owners", headers=api.auth(HOST_TOKEN))
    assert (nameless.status_code, nameless.json()["reason"]) == (422, "validation")

    exported = api.http.get("/v1/owners/export", headers={**api.auth(HOST_TOKEN), **owner})
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    header, *records = [json.loads(line) for line in exported.text.splitlines()]
    assert header["owner_id"] == alice.owner
    assert sorted(r["text"] for r in records if r["type"] == "source") == sorted(alice.sources)

    erased = api.http.delete("/v1/owners", headers={**api.auth(HOST_TOKEN), **owner})
    assert erased.status_code == 200 and erased.json()["counts"]["sources"] >= 2
    assert api.get("/v1/sources", owner=alice.owner, token=GATEWAY_TOKEN).json()["sources"] == []
    assert len(api.get("/v1/sources", owner=bob.owner, token=GATEWAY_TOKEN).json()["sources"]) == 2
    again = api.http.delete("/v1/owners", headers={**api.auth(HOST_TOKEN), **owner})
    assert again.status_code == 200 and again.json()["total"] == 0
