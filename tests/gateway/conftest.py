"""The gateway's side (issue 34): one live API per test, seeded for the tools."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from memjobs_client.contracts import TaskRef, owner_key
from tests.support.http import GATEWAY_TOKEN, HOST_TOKEN, Api

#: The owner the seeded tests read: a learned memory, a session digest with a running task.
SEEDED_OWNER = "gateway-seeded@example.com"
PEANUTS = "我对花生过敏。"


@pytest.fixture
def seeded_api(api_factory: Callable[..., Api]) -> Api:
    """A tokened API whose SEEDED_OWNER has a learned memory and a digest (task t-movers running)."""
    api = api_factory(api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)
    h = api.harness
    key = owner_key(SEEDED_OWNER)
    h.runtime.sessions.save_digest(
        key, "s-movers", "搬家", "约了周六的搬家公司", [TaskRef(task_id="t-movers", goal="book movers")]
    )
    h.runtime.sessions.record_task(key, "t-movers", "book movers", "running")
    h.client.remember(SEEDED_OWNER, PEANUTS, session_id="s-movers")
    h.drain()
    return api
