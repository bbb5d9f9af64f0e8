"""A small "company memory" HTTP service, the storage behind the example memory
adapter (:mod:`tests.support.memory_adapter`): what a host's own records
service might look like, and nothing memjobs knows about.

It keeps, per (tenant, user), records of two kinds, ``profile`` and ``notes``,
each with a body and a revision, in memory:

* ``GET /v1/tenants/{tenant}/users/{user}/records`` -> ``{"records": [{"kind", "body", "rev"}]}``
* ``POST /v1/tenants/{tenant}/users/{user}/records`` with
  ``{"writes": [{"kind", "body", "ifRev"}], "meta": {...}}``: every write or none;
  ``409 {"records": [...]}`` when a record is not at ``ifRev``, else
  ``200 {"records": [the written ones]}``.
* ``GET /v1/health`` -> ``{"ok": true}``.

Every write's ``meta`` (what the adapter was given as the change context) is
kept in :attr:`RecordsService.writes`, and ``down`` makes every request answer
503, so tests can look at both.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import unquote

KINDS = ("profile", "notes")


class RecordsService:
    """The service on 127.0.0.1 and a free port, in a thread (``with`` starts and stops it)."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.writes: list[dict[str, Any]] = []  # {"tenant", "user", "kinds", "meta"}
        self.down = False
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def body(self, tenant: str, user: str, kind: str) -> str | None:
        record = self.records.get((tenant, user, kind))
        return None if record is None else str(record["body"])

    # -- the HTTP side --------------------------------------------------------------

    def _list(self, tenant: str, user: str) -> list[dict[str, Any]]:
        return [dict(r, kind=k) for (t, u, k), r in sorted(self.records.items()) if (t, u) == (tenant, user)]

    def _write(self, tenant: str, user: str, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        writes = request.get("writes")
        if not isinstance(writes, list) or any(
            not isinstance(w, dict) or w.get("kind") not in KINDS or not isinstance(w.get("body"), str) for w in writes
        ):
            return 400, {"error": "writes: [{kind: profile|notes, body, ifRev}]"}
        with self._lock:
            for w in writes:
                current = self.records.get((tenant, user, w["kind"]), {}).get("rev", 0)
                if w.get("ifRev") is not None and w["ifRev"] != current:
                    return 409, {"records": self._list(tenant, user)}
            written = []
            for w in writes:
                key = (tenant, user, w["kind"])
                rev = self.records.get(key, {}).get("rev", 0) + 1
                self.records[key] = {"body": w["body"], "rev": rev}
                written.append({"kind": w["kind"], "body": w["body"], "rev": rev})
            self.writes.append(
                {"tenant": tenant, "user": user, "kinds": [w["kind"] for w in writes], "meta": request.get("meta")}
            )
        return 200, {"records": written}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _route(self) -> tuple[str, str] | None:
                parts = self.path.split("/")
                # "", "v1", "tenants", t, "users", u, "records"
                if (
                    len(parts) == 7
                    and parts[1:3] == ["v1", "tenants"]
                    and parts[4] == "users"
                    and parts[6] == "records"
                ):
                    return unquote(parts[3]), unquote(parts[5])
                return None

            def do_GET(self) -> None:  # noqa: N802
                if service.down:
                    return self._reply(503, {"error": "down"})
                if self.path == "/v1/health":
                    return self._reply(200, {"ok": True})
                route = self._route()
                if route is None:
                    return self._reply(404, {"error": "no such route"})
                with service._lock:
                    self._reply(200, {"records": service._list(*route)})

            def do_POST(self) -> None:  # noqa: N802
                if service.down:
                    return self._reply(503, {"error": "down"})
                route = self._route()
                if route is None:
                    return self._reply(404, {"error": "no such route"})
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    return self._reply(400, {"error": "not JSON"})
                self._reply(*service._write(*route, request))

        return Handler
