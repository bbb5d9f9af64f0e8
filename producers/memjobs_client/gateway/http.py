"""The memjobs HTTP API for a Python gateway, on the standard library alone.

What: :class:`GatewayApi`, the few calls the gateway's provider and tools make
(the memory documents, with a conditional GET; the memory tool's edits; recall;
session digests), with the TypeScript client's safety rules: the base URL is
HTTPS or plain HTTP on loopback, redirects are refused, every body is capped
while it is read, every call has a timeout. An error reply raises
:class:`ApiError` carrying the RFC 9457 problem's ``reason``.

Why urllib: the producer distribution stays light (Dramatiq, redis, pydantic);
a gateway needs no HTTP library of its own to use memjobs.
"""

from __future__ import annotations

import ipaddress
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from memjobs_client.errors import ConfigurationError, MemjobsError

DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024
DEFAULT_TIMEOUT_MS = 10_000


class ApiError(MemjobsError):
    """An error reply of the API (its problem's ``reason``), or a client-side one
    (``network``, ``timeout``, ``response_too_large``, ``bad_reply``, ``closed``)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "client", detail: str | None = None) -> None:
        super().__init__(message, reason=reason)
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class Reply:
    status: int
    etag: str | None
    body: Any


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_base_url(base_url: str) -> str:
    """``base_url`` without its trailing slash: HTTPS, or HTTP on a loopback address.

    Raises:
        ConfigurationError: anything else, or credentials, a query or a fragment in it.
    """
    url = urllib.parse.urlsplit(base_url)
    if url.username or url.password or url.query or url.fragment:
        raise ConfigurationError("memjobs base URL: no credentials, query or fragment")
    if url.scheme == "https" or (url.scheme == "http" and _loopback(url.hostname or "")):
        return base_url.rstrip("/")
    raise ConfigurationError("memjobs base URL must be https://, or http:// on a loopback address")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx is then an HTTPError: refused


class GatewayApi:
    """The calls of a gateway's provider and tools.

    Parameters:
        base_url: ``https://…``, or ``http://`` on loopback.
        token: the gateway token, or a scoped token for the owners served.
        timeout_ms: per call.
        max_response_bytes: a reply's body, at most.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.base_url = check_base_url(base_url)
        self.token = token
        self.timeout_s = timeout_ms / 1000
        self.max_response_bytes = max_response_bytes
        self._opener = urllib.request.build_opener(_NoRedirects)

    # -- the calls ------------------------------------------------------------------

    def memory_documents(self, owner_id: str, etag: str | None = None) -> Reply:
        """USER.md and MEMORY.md; status 304 (no body) while ``etag`` still names them."""
        headers = {"If-None-Match": etag} if etag else {}
        return self.request("GET", "/v1/memory/documents", owner=owner_id, headers=headers)

    def memory_document(self, owner_id: str, doc: str) -> dict[str, Any]:
        path = "/v1/memory/documents/" + urllib.parse.quote(doc, safe="")
        return dict(self.request("GET", path, owner=owner_id).body)

    def edit_memory(
        self, owner_id: str, edits: list[dict[str, Any]], context: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"owner_id": owner_id, "edits": edits}
        if context is not None:
            body["context"] = context
        return dict(self.request("POST", "/v1/memory/edits", body=body).body)

    def recall(self, owner_id: str, query: str, limit: int) -> dict[str, Any]:
        return dict(
            self.request("POST", "/v1/recall", body={"owner_id": owner_id, "query": query, "limit": limit}).body
        )

    def sessions(self, owner_id: str, days: int, limit: int) -> dict[str, Any]:
        return dict(self.request("GET", "/v1/sessions", owner=owner_id, query={"days": days, "limit": limit}).body)

    # -- the transport ------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        owner: str | None = None,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """One call; a 2xx or 304 reply, else :class:`ApiError`."""
        sent = {"Accept": "application/json, application/problem+json", **(headers or {})}
        if self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        if owner is not None:
            sent["X-Memjobs-Owner"] = urllib.parse.quote(owner, safe="")
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            sent["Content-Type"] = "application/json"
        url = self.base_url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        req = urllib.request.Request(url, data=data, headers=sent, method=method)  # noqa: S310 - base_url checked: https or loopback http
        try:
            with self._opener.open(req, timeout=self.timeout_s) as response:
                return Reply(response.status, response.headers.get("ETag"), self._json(response, method, path))
        except urllib.error.HTTPError as error:
            with error:
                if error.code == 304:
                    return Reply(304, error.headers.get("ETag"), None)
                problem = self._json(error, method, path, strict=False)
                reason = problem.get("reason") if isinstance(problem, dict) else None
                detail = problem.get("detail") if isinstance(problem, dict) else None
                raise ApiError(
                    f"memjobs: {method} {path}: {error.code}",
                    status=error.code,
                    reason=reason if isinstance(reason, str) else "http_error",
                    detail=detail if isinstance(detail, str) else None,
                ) from None
        except TimeoutError:
            raise ApiError(f"memjobs: {method} {path} timed out", reason="timeout") from None
        except (urllib.error.URLError, OSError) as error:
            reason = "timeout" if "timed out" in str(error) else "network"
            raise ApiError(f"memjobs: {method} {path} failed ({reason})", reason=reason) from None

    def _json(self, response: Any, method: str, path: str, *, strict: bool = True) -> Any:
        raw = response.read(self.max_response_bytes + 1)
        if len(raw) > self.max_response_bytes:
            raise ApiError(
                f"memjobs: {method} {path}: reply over {self.max_response_bytes} bytes",
                status=getattr(response, "status", 0),
                reason="response_too_large",
            )
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            if not strict:
                return None
            raise ApiError(f"memjobs: {method} {path}: the reply is not JSON", reason="bad_reply") from None
