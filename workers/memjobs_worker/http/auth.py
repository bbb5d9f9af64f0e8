"""Who may call, and for whom: bearer tokens from settings, scoped tokens, the bind rule.

Three kinds of bearer token (docs/security.md):

- the **gateway** token (``MEMJOBS_API_GATEWAY_TOKEN``): every scope but
  ``admin``, for every owner;
- the **host** token (``MEMJOBS_API_HOST_TOKEN``): every scope, ``admin``
  (knowledge re-indexing, dead letters) included, for every owner;
- **scoped** tokens (:mod:`~memjobs_worker.http.tokens`): signed, expiring, for
  the scopes and owners they name.

With none of them configured the API is open, which :func:`check_bind` allows
on a loopback address only. Authentication (401) happens in the guard
middleware (:mod:`~memjobs_worker.http.limits`) before a body is read; the
scope a route needs is checked there too (403); the owner a request names is
checked by the routes' dependency (:func:`gateway`, :func:`host`) once the
body is parsed (403).
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote

from fastapi import Request

from memjobs_client.errors import ConfigurationError
from memjobs_worker.http.problems import ProblemError
from memjobs_worker.http.tokens import SCOPES, InvalidToken, ScopedKeys
from memjobs_worker.settings import Settings

Tier = Literal["gateway", "host"]

#: The key of the caller's :class:`Principal` in the ASGI scope's ``state``.
PRINCIPAL = "memjobs_principal"
#: The key of the route's :class:`Need` in the ASGI scope's ``state``.
NEED = "memjobs_need"

GATEWAY_SCOPES = frozenset(SCOPES) - {"admin"}
ALL_SCOPES = frozenset(SCOPES)


@dataclass(frozen=True)
class Need:
    """What a route needs: one scope, and whether it acts for one owner (or across owners)."""

    scope: str
    per_owner: bool = True


#: The scope of each /v1 route, by (method, route template). A route missing here
#: (a new one) is open to the static tokens by its tier (the dependency it declares)
#: and to scoped tokens only with ``admin`` for every owner.
ROUTE_NEEDS: dict[tuple[str, str], Need] = {
    ("POST", "/v1/remember"): Need("write"),
    ("POST", "/v1/forget"): Need("forget"),
    ("POST", "/v1/recall"): Need("read"),
    ("GET", "/v1/preferences"): Need("read"),
    ("GET", "/v1/sources"): Need("read"),
    ("GET", "/v1/memories"): Need("read"),
    ("GET", "/v1/memory/documents"): Need("read"),
    ("GET", "/v1/memory/documents/{doc}"): Need("read"),
    ("POST", "/v1/memory/edits"): Need("write"),
    ("POST", "/v1/sessions/{session_id}/end"): Need("session"),
    ("GET", "/v1/sessions"): Need("session"),
    ("PUT", "/v1/tasks/{task_id}"): Need("session"),
    ("POST", "/v1/knowledge/search"): Need("knowledge"),
    ("POST", "/v1/knowledge/reindex"): Need("admin"),
}
#: Routes across owners (dead letters), and routes not in the table: ``admin`` for every owner.
CROSS_OWNER = Need("admin", per_owner=False)


def need_of(method: str, template: str) -> Need | None:
    """The :class:`Need` of the route ``template`` (``path_format``) for ``method``
    (None: not in :data:`ROUTE_NEEDS`)."""
    if template.startswith("/v1/ops/"):
        return CROSS_OWNER
    return ROUTE_NEEDS.get((method, template))


@dataclass(frozen=True)
class Principal:
    """Who a request is: its scopes, and the owners it may act for (None: every owner)."""

    kind: Literal["open", "gateway", "host", "scoped"]
    scopes: frozenset[str]
    owners: frozenset[str] | None = None
    owner_prefix: str | None = None

    @property
    def every_owner(self) -> bool:
        return self.owners is None

    def covers(self, owner_id: str) -> bool:
        if self.owners is None or owner_id in self.owners:
            return True
        return self.owner_prefix is not None and owner_id.startswith(self.owner_prefix)

    def require(self, need: Need) -> None:
        """Raise 403 unless this principal has the route's scope (and every owner when
        the route acts across owners)."""
        if need.scope not in self.scopes:
            if self.kind == "gateway":
                raise ProblemError("forbidden", "this route needs the host token")
            raise ProblemError("forbidden", f"this token lacks the {need.scope} scope")
        if not need.per_owner and not self.every_owner:
            raise ProblemError("forbidden", "this route acts across owners; this token is "
                               "limited to some")

    def require_owner(self, owner_id: str) -> None:
        if not self.covers(owner_id):
            raise ProblemError("forbidden", "this token may not act for this owner")


OPEN = Principal("open", ALL_SCOPES)
GATEWAY = Principal("gateway", GATEWAY_SCOPES)
HOST = Principal("host", ALL_SCOPES)


def is_loopback(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ::1, bracketed or not: where the API
    may run without tokens, and the host names the open API answers to (never
    another DNS name, which a rebinding page controls)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _static(value: Any, name: str) -> bytes | None:
    if value is None:
        return None
    raw: str = value.get_secret_value()
    if not raw.strip() or raw != raw.strip():
        raise ConfigurationError(f"{name} must not be blank or start or end with spaces")
    if len(raw) < 16:
        raise ConfigurationError(f"{name} must be at least 16 characters")
    return raw.encode()


def check_bind(settings: Settings) -> None:
    """Refuse settings that would expose the API: without credentials, or in plain
    HTTP, off loopback; blank, short or equal tokens; half a TLS pair.

    Raises:
        ConfigurationError: saying which setting to set.
    """
    for name in sorted(settings.blank_credentials):
        raise ConfigurationError(f"MEMJOBS_{name.upper()} must not be blank: set a token, or "
                                 "leave it unset")
    gateway = _static(settings.api_gateway_token, "MEMJOBS_API_GATEWAY_TOKEN")
    host = _static(settings.api_host_token, "MEMJOBS_API_HOST_TOKEN")
    scoped = ScopedKeys(settings)  # refuses blank, short or equal keys
    if (settings.api_tls_cert is None) != (settings.api_tls_key is None):
        raise ConfigurationError("set both MEMJOBS_API_TLS_CERT and MEMJOBS_API_TLS_KEY, or neither")
    if gateway is not None and host is not None and hmac.compare_digest(gateway, host):
        raise ConfigurationError("MEMJOBS_API_GATEWAY_TOKEN and MEMJOBS_API_HOST_TOKEN must differ")
    if is_loopback(settings.api_host):
        return
    if not scoped.enabled and (gateway is None or host is None):
        raise ConfigurationError(
            f"MEMJOBS_API_HOST={settings.api_host} is not a loopback address: set both "
            "MEMJOBS_API_GATEWAY_TOKEN and MEMJOBS_API_HOST_TOKEN, or MEMJOBS_API_TOKEN_KEY "
            "for scoped tokens (docs/security.md)")
    if settings.api_tls_cert is None and not settings.api_tls_terminated_by_proxy:
        raise ConfigurationError(
            f"MEMJOBS_API_HOST={settings.api_host} is not a loopback address: serve HTTPS "
            "(MEMJOBS_API_TLS_CERT and MEMJOBS_API_TLS_KEY), or set "
            "MEMJOBS_API_TLS_TERMINATED_BY_PROXY=true when a proxy in front terminates TLS "
            "(docs/security.md)")


@dataclass(frozen=True)
class Tokens:
    """The configured credentials: static tokens as bytes (for :func:`hmac.compare_digest`)
    and the scoped tokens' keys."""

    gateway: bytes | None
    host: bytes | None
    scoped: ScopedKeys | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Tokens:
        def raw(value: Any) -> bytes | None:
            return None if value is None else value.get_secret_value().encode()

        keys = ScopedKeys(settings)
        return cls(raw(settings.api_gateway_token), raw(settings.api_host_token),
                   keys if keys.enabled else None)

    @property
    def open(self) -> bool:
        return self.gateway is None and self.host is None and self.scoped is None

    def authenticate(self, header: str | None) -> Principal:
        """The :class:`Principal` of an ``Authorization`` header.

        Raises:
            ProblemError: 401 ``unauthorized`` (no token, an unknown one, an expired
                or badly signed scoped token).
        """
        if self.open:
            return OPEN
        presented = _bearer(header)
        if presented is None:
            raise _unauthorized()
        # Compare against both static tokens every time: the timing says nothing of which matched.
        is_host = self.host is not None and hmac.compare_digest(presented, self.host)
        is_gateway = self.gateway is not None and hmac.compare_digest(presented, self.gateway)
        if is_host:
            return HOST
        if is_gateway:
            return GATEWAY
        if self.scoped is not None and presented.count(b".") == 2:
            try:
                grant = self.scoped.verify(presented.decode("ascii"))
            except InvalidToken as exc:
                raise _unauthorized(str(exc), error="invalid_token") from None
            return Principal("scoped", grant.scopes,
                             None if grant.all_owners else grant.owners, grant.owner_prefix)
        raise _unauthorized()

    def authorize(self, header: str | None, tier: Tier) -> None:
        """Raise a problem unless the header's token opens ``tier`` for every owner
        (the static tokens' rule, as ``/mcp`` applies it)."""
        principal = self.authenticate(header)
        principal.require(Need("admin" if tier == "host" else "read", per_owner=False))


def _unauthorized(detail: str | None = None, error: str | None = None) -> ProblemError:
    challenge = f'Bearer error="{error}"' if error else "Bearer"
    return ProblemError("unauthorized", detail, headers={"WWW-Authenticate": challenge})


def _bearer(header: str | None) -> bytes | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    try:
        return value.strip().encode("ascii")
    except UnicodeEncodeError:
        return None


async def gateway(request: Request) -> None:
    """Dependency of the gateway routes: the owner the request names is one the
    caller may act for (authentication and scope were checked by the guard)."""
    await _authorize(request, "gateway")


async def host(request: Request) -> None:
    """Dependency of the host routes (re-indexing, dead letters)."""
    await _authorize(request, "host")


async def _authorize(request: Request, tier: Tier) -> None:
    state = request.scope.setdefault("state", {})
    principal: Principal | None = state.get(PRINCIPAL)
    if principal is None:  # not through the guard (an app built without it)
        principal = request.app.state.ctx.tokens.authenticate(request.headers.get("authorization"))
    assert principal is not None
    route = request.scope.get("route")
    need = need_of(request.method, getattr(route, "path_format", "") or "")
    if need is None:  # a route the table does not name: by tier, or admin for every owner
        need = (CROSS_OWNER if principal.kind == "scoped" or tier == "host"
                else Need("read", per_owner=False))
    elif tier == "host" and need.scope != "admin":
        need = Need("admin", need.per_owner)
    principal.require(need)
    if principal.every_owner or not need.per_owner:
        return
    principal.require_owner(await _owner_named(request))


async def _owner_named(request: Request) -> str:
    """The owner id a request names: ``X-Memjobs-Owner`` on a GET, ``owner_id`` in a body."""
    if request.method == "GET":
        value = request.headers.get("x-memjobs-owner")
        try:
            owner = unquote(value or "", errors="strict")
        except UnicodeDecodeError:
            owner = ""
        if not owner:
            raise ProblemError("validation", "X-Memjobs-Owner header is required")
        return owner
    try:
        body = await request.json()
    except ValueError:
        raise ProblemError("malformed_json", "the body could not be parsed as JSON") from None
    named = body.get("owner_id") if isinstance(body, dict) else None
    if not isinstance(named, str) or not named:
        raise ProblemError("validation", "owner_id is required")
    return named
