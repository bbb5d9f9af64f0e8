"""Reads against a running stack through its HTTP API, so that a listing costs
what importing the producer client costs rather than the database drivers, the
ledger and mem0's wiring (``memjobs sources`` in about a third of the time).

A read goes to the API only when it is sure to be answered the same way the
direct path would answer: a stack runs here and its API listens on plain HTTP,
and the shell has a token if the stack wants one. Anything else — no API yet,
a token missing, an owner id HTTP headers cannot carry, any answer but 200 —
returns None, and the command reads directly, where errors are said as always.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode

from memjobs_worker.cli.stack_view import StackView
from memjobs_worker.settings import ApiSettings

TIMEOUT_S = 10.0


def api_get(
    view: StackView | None,
    api: ApiSettings,
    path: str,
    owner: str,
    params: dict[str, Any],
    body: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """``GET path?params`` on the running stack's API for ``owner`` with ``api``'s
    token (``POST
    of the JSON ``body`` when one is given: recall); None when the API cannot
    answer this read (see the module's docstring)."""
    if view is None or view.stack is None or not view.stack.api_url:
        return None
    if not view.stack.api_url.startswith("http://"):
        return None
    token = api.host_token or api.gateway_token
    wants_token = any(view.secrets_set.get(name) for name in ("api.gateway_token", "api.host_token", "api.token_key"))
    if wants_token and token is None:
        return None
    try:
        owner.encode("latin-1")
    except UnicodeEncodeError:
        return None  # a header carries Latin-1 only
    headers = {"X-Memjobs-Owner": owner, "Accept": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token.get_secret_value()}"
    data = None
    if body is not None:
        data = json.dumps(body, ensure_ascii=False).encode()
        headers["Content-Type"] = "application/json"
    query = f"?{urlencode(params)}" if params else ""
    request = urllib.request.Request(f"{view.stack.api_url}{path}{query}", data=data, headers=headers)  # noqa: S310 - our own API
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:  # noqa: S310 - our own API
            if reply.status != 200:
                return None
            document: dict[str, Any] = json.loads(reply.read())
            return document
    except (urllib.error.URLError, OSError, ValueError):
        return None
