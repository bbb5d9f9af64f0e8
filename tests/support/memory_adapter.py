"""An example third-party memory provider, written to the seeds' MemoryProvider
shape: the documents live behind a host's own HTTP service
(:mod:`tests.support.records_service`), not in memjobs.

It shows what an adapter is responsible for, and nothing more:

- **tenant mapping**: it is given the owner id (never a hash) and maps it to the
  service's (tenant, user): ``"acme/alice"`` -> tenant ``acme``, user ``alice``;
  an id without a slash belongs to tenant ``default``;
- **the two public document semantics**: the service's ``profile`` record is the
  ``user`` scope (USER.md), its ``notes`` record the ``memory`` scope (MEMORY.md);
- **a synchronous, bounded** ``list``: one short HTTP call, capped at the
  options' bounds; when the service does not answer, the last snapshot of that
  owner (its local cache) rather than an error;
- an **async** ``apply`` that sends every change in one request with the
  version it was computed from, and the change context (source, session, turn,
  trace) as the request's metadata; a conflict answers ``{"changed": 0, ...}``,
  which tells memjobs to re-read and try again;
- ``health`` and ``close``.

It subclasses nothing and imports only the protocol version from memjobs.
Inject it with ``MEMJOBS_MEMORY_DOCS_PROVIDER=tests.support.memory_adapter:from_env``
(the service's URL in ``RECORDS_SERVICE_URL``), or build it yourself and pass it
to ``MemoryService``.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from memjobs_worker.sessions.memory_docs import PROTOCOL_VERSION

SCOPE_OF_KIND = {"profile": "user", "notes": "memory"}
KIND_OF_SCOPE = {scope: kind for kind, scope in SCOPE_OF_KIND.items()}


class RecordsMemoryAdapter:
    """USER.md and MEMORY.md as a records service's ``profile`` and ``notes``."""

    def __init__(self, base_url: str, *, timeout_s: float = 2.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._cache: dict[str, list[dict[str, Any]]] = {}
        self.closed = False

    # -- the seeds' five methods ------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {"protocolVersion": PROTOCOL_VERSION, "key": "company-memory", "label": "Company Memory"}

    def list(self, owner_id: str, options: Any) -> list[dict[str, Any]]:
        try:
            records = self._call("GET", self._records_url(owner_id))["records"]
            self._cache[owner_id] = records
        except OSError:
            records = self._cache.get(owner_id, [])  # the service is away: the last snapshot
        docs = [
            {"scope": SCOPE_OF_KIND[r["kind"]], "content": r["body"][: options.max_chars], "version": r["rev"]}
            for r in records
            if r.get("kind") in SCOPE_OF_KIND
        ]
        return docs[: options.max_docs]

    async def apply(self, owner_id: str, changes: Sequence[Any], context: Any) -> dict[str, Any]:
        request = {
            "writes": [
                {"kind": KIND_OF_SCOPE[c.scope], "body": c.content, "ifRev": c.expected_version} for c in changes
            ],
            "meta": {
                "source": context.source,
                "session": context.session,
                "turn": context.turn,
                "trace": context.trace,
            },
        }
        status, answer = await asyncio.to_thread(self._send, "POST", self._records_url(owner_id), request)
        if status == 409:
            return {"changed": 0, "documents": []}  # moved on: memjobs re-reads and retries
        if status != 200:
            raise OSError(f"records service answered {status}")
        records = {r["kind"]: r for r in self._cache.get(owner_id, [])}
        records.update({r["kind"]: r for r in answer["records"]})
        self._cache[owner_id] = list(records.values())  # what list answers while the service is away
        written = [
            {"scope": SCOPE_OF_KIND[r["kind"]], "content": r["body"], "version": r["rev"]} for r in answer["records"]
        ]
        return {"changed": len(written), "documents": written}

    def health(self) -> dict[str, Any]:
        try:
            self._call("GET", f"{self.base_url}/v1/health")
        except OSError as exc:
            return {"ok": False, "detail": f"records service: {type(exc).__name__}"}
        return {"ok": True}

    async def close(self) -> None:
        self.closed = True

    # -- the adapter's own business ---------------------------------------------------

    @staticmethod
    def tenant_of(owner_id: str) -> tuple[str, str]:
        """The service's (tenant, user) of an owner id."""
        tenant, sep, user = owner_id.partition("/")
        return (tenant, user) if sep and tenant and user else ("default", owner_id)

    def _records_url(self, owner_id: str) -> str:
        tenant, user = self.tenant_of(owner_id)
        return f"{self.base_url}/v1/tenants/{quote(tenant, safe='')}/users/{quote(user, safe='')}/records"

    def _call(self, method: str, url: str) -> dict[str, Any]:
        status, answer = self._send(method, url, None)
        if status != 200:
            raise OSError(f"records service answered {status}")
        return answer

    def _send(self, method: str, url: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, json.loads(exc.read() or b"{}")
            finally:
                exc.close()


def from_env() -> RecordsMemoryAdapter:
    """The factory ``MEMJOBS_MEMORY_DOCS_PROVIDER`` names: the service at ``RECORDS_SERVICE_URL``."""
    return RecordsMemoryAdapter(os.environ["RECORDS_SERVICE_URL"])
