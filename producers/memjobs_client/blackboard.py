"""A gateway's side of the L0 blackboard: append a session's entries through the
job queue, restore them on any host over the HTTP API.

The seeds kept each session's blackboard in a SQLite file on the gateway's own
host; here the entries live in memjobs' state database, so a session resumed on
another host finds them::

    board = SessionBlackboard(MemjobsClient(redis_url), api_url="https://memjobs.internal",
                              token=gateway_token)
    board.append("user-42", "s-1", [{"entry_id": "e-1", "seq": 1, "at": "2026-12-04T10:00:00Z",
                                     "trust": "runtime", "priority": 1, "result": "table booked",
                                     "evidence": ["task:t-1"]}])
    entries = board.restore("user-42", "s-1")   # on any host, in event order

Appends are idempotent by entry id and may arrive in any order: the entries come
back ordered by ``seq``. Every field passes the sensitive-content check of
every other field: an append carrying a credential raises ``SensitiveContent``
and nothing of it is queued. The restore speaks HTTPS, or HTTP to a loopback
address only, refuses redirects and caps each reply; it uses the standard
library alone (the producer package stays light).
"""

from __future__ import annotations

import ipaddress
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from memjobs_client.client import MemjobsClient
from memjobs_client.contracts import ACTOR_APPEND_BLACKBOARD, MAX_BLACKBOARD_APPEND, AppendBlackboard
from memjobs_client.errors import BackendUnavailable, ConfigurationError, InvalidPayload, MemjobsError
from memjobs_client.payloads import build_payload, owner_key_of
from memjobs_client.validation import as_list

#: Entries one ``append`` call takes at most (sent as messages of up to 100).
MAX_APPEND_CALL = 1000
#: About the most bytes of entries one message (or request) carries: an append of larger
#: entries goes as more messages, each within the HTTP API's default body cap (1 MiB).
APPEND_PART_BYTES = 512 * 1024
#: The default cap on one reply of the API, in bytes (a page is about 512 KiB at most).
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024


class BlackboardApiError(MemjobsError):
    """The API refused a restore: ``status`` and the problem's ``reason``."""

    def __init__(self, message: str, *, status: int, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is answered as the error it is


class SessionBlackboard:
    """Append and restore sessions' L0 blackboards.

    Parameters:
        client: the producer client appends go through (its Redis).
        api_url: the memjobs HTTP API, for restores: ``https://…``, or
            ``http://`` on a loopback address.
        token: the gateway token (or a scoped token with the ``session`` scope).
        cafile: a CA bundle to trust for the API's certificate (default: the system's).
        timeout_s: bound on each HTTP call.
        max_response_bytes: a longer reply is refused (``response_too_large``).
    """

    def __init__(
        self,
        client: MemjobsClient,
        *,
        api_url: str | None = None,
        token: str | None = None,
        cafile: str | None = None,
        timeout_s: float = 10.0,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.client = client
        self.api_url = _checked_url(api_url) if api_url is not None else None
        self.token = token
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        handlers: list[Any] = [_NoRedirects()]
        if cafile is not None:
            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=cafile)))
        self._opener = urllib.request.build_opener(*handlers)

    def append(self, owner_id: str, session_id: str, entries: Sequence[Mapping[str, Any]]) -> int:
        """Queue the entries for the session's blackboard; returns how many were queued.

        Every entry is validated (and checked for credentials) before any is sent;
        more than 100 entries, or about 512 KiB, go as several messages.

        Raises:
            InvalidPayload: a malformed entry, more than 1,000 entries.
            SensitiveContent: a field carries a credential (nothing is queued).
            BackendUnavailable: Redis did not answer (the messages already queued
                stay queued: appending them again changes nothing).
        """
        payloads = self.payloads(owner_id, session_id, entries)
        self.send(payloads)
        return sum(len(p["entries"]) for p in payloads)

    def payloads(self, owner_id: str, session_id: str, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The append's messages, every entry validated and checked for credentials
        (CPU: a door runs this off its event loop). Raises as :meth:`append`."""
        items = as_list("AppendBlackboard", "entries", entries, MAX_APPEND_CALL)
        if not items:
            raise InvalidPayload("entries: at least one entry")
        key = owner_key_of(owner_id)
        return [
            build_payload(AppendBlackboard, rules=self.client.rules, owner_key=key, session_id=session_id, entries=part)
            for part in _parts(items)
        ]

    def send(self, payloads: Sequence[dict[str, Any]]) -> None:
        """Enqueue messages made by :meth:`payloads`. Raises ``BackendUnavailable``."""
        for payload in payloads:
            self.client._send(ACTOR_APPEND_BLACKBOARD, payload)

    def restore(self, owner_id: str, session_id: str) -> list[dict[str, Any]]:
        """The session's live entries, in event order (every page of
        ``GET /v1/sessions/{id}/blackboard``).

        Raises:
            ConfigurationError: no ``api_url`` was given.
            BlackboardApiError: the API answered with a problem (its reason).
            BackendUnavailable: the API did not answer.
        """
        if self.api_url is None:
            raise ConfigurationError("restoring a blackboard needs the HTTP API's URL (api_url)")
        entries: list[dict[str, Any]] = []
        after: dict[str, Any] = {}
        while True:
            page = self._get(f"/v1/sessions/{quote(session_id, safe='')}/blackboard", owner_id, after)
            entries.extend(page["entries"])
            following = page.get("next_after")
            if not following:
                return entries
            after = {"after_seq": following["seq"], "after_id": following["entry_id"]}

    def _get(self, path: str, owner_id: str, query: Mapping[str, Any]) -> dict[str, Any]:
        assert self.api_url is not None
        url = self.api_url + path + (f"?{urlencode(query)}" if query else "")
        headers = {"Accept": "application/json, application/problem+json", "X-Memjobs-Owner": quote(owner_id, safe="")}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, headers=headers, method="GET")  # noqa: S310 - api_url is https or loopback http (_checked_url)
        try:
            with self._opener.open(request, timeout=self.timeout_s) as reply:
                body = reply.read(self.max_response_bytes + 1)
        except urllib.error.HTTPError as exc:
            problem = _json(exc.read(64 * 1024)) or {}
            raise BlackboardApiError(
                f"memjobs: GET {path}: {problem.get('title', exc.code)}",
                status=exc.code,
                reason=str(problem.get("reason", "http_error")),
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            raise BackendUnavailable(f"the memjobs API did not answer: {type(exc).__name__}") from None
        if len(body) > self.max_response_bytes:
            raise BlackboardApiError(
                "memjobs: the reply is over max_response_bytes", status=0, reason="response_too_large"
            )
        document = _json(body)
        if not isinstance(document, dict) or not isinstance(document.get("entries"), list):
            raise BlackboardApiError("memjobs: the reply is not a blackboard page", status=0, reason="bad_reply")
        return document


def _parts(items: list[Any]) -> list[list[Any]]:
    """``items`` in order, cut into parts of at most 100 entries and about
    :data:`APPEND_PART_BYTES` of JSON (an entry larger than that is a part alone)."""
    parts: list[list[Any]] = [[]]
    size = 0
    for item in items:
        cost = len(json.dumps(item, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
        if parts[-1] and (len(parts[-1]) >= MAX_BLACKBOARD_APPEND or size + cost > APPEND_PART_BYTES):
            parts.append([])
            size = 0
        parts[-1].append(item)
        size += cost
    return parts


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _checked_url(url: str) -> str:
    """``url`` without its trailing slash, if it is HTTPS or loopback HTTP.

    Raises:
        ConfigurationError: another scheme, or plain HTTP to a host that is not loopback.
    """
    parts = urlsplit(url)
    host = (parts.hostname or "").strip("[]")
    if parts.scheme == "https" and host:
        return url.rstrip("/")
    if parts.scheme == "http":
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if loopback:
            return url.rstrip("/")
    raise ConfigurationError("api_url must be https://, or http:// on a loopback address")
