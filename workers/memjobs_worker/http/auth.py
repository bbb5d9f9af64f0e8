"""Who may call, and for whom: bearer tokens from settings, scoped tokens, the bind rule.

Three kinds of bearer token (docs/security.md):

- the **gateway** token (``MEMJOBS_API_GATEWAY_TOKEN``): every scope but
  ``admin``, for every owner;
- the **host** token (``MEMJOBS_API_HOST_TOKEN``): every scope, ``admin``
  (knowledge re-indexing, dead letters) included, for every owner;
- **scoped** tokens (:mod:`~memjobs_worker.http.scoped_tokens`): signed, expiring, for
  the scopes and owners they name.

With none of them configured the API is open, which :func:`check_bind` allows
on a loopback address only. Authentication (401) happens in the guard
middleware (:mod:`~memjobs_worker.http.guard`) before a body is read. Each
route declares the scope it needs once, ``dependencies=[needs("read")]``; the
route class (:class:`~memjobs_worker.http.body.JsonRoute`) runs that one check
(:func:`authorize`) before the body is parsed: the scope (403), then the owner
the request names (403), read by :func:`owner_id_of_header` (the one parser of
``X-Memjobs-Owner``) or from the body's ``owner_id``.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote

from fastapi import Depends, Request

from memjobs_client.contracts import owner_key
from memjobs_client.errors import ConfigurationError
from memjobs_worker.http.problems import ProblemError
from memjobs_worker.http.scoped_tokens import SCOPES, InvalidToken, ScopedKeys
from memjobs_worker.settings import ApiSettings

#: The key of the caller's :class:`Principal` in the ASGI scope's ``state``.
PRINCIPAL = "memjobs_principal"
#: The key, in the ASGI scope's ``state``, saying the route's check was done.
AUTHORIZED = "memjobs_authorized"

GATEWAY_SCOPES = frozenset(SCOPES) - {"admin"}
ALL_SCOPES = frozenset(SCOPES)
#: The longest ``X-Memjobs-Owner`` accepted (percent-encoded).
MAX_OWNER_HEADER = 800


@dataclass(frozen=True)
class Need:
    """What a route needs: one scope, and whether it acts for one owner (or across owners).

    Declared once on a route with :func:`needs`; as a dependency it runs
    :func:`authorize` (the route class has usually run it already, before the body
    was parsed: then it does nothing)."""

    scope: str
    per_owner: bool = True

    async def __call__(self, request: Request) -> None:
        await authorize(request, self)


def needs(scope: str, *, per_owner: bool = True) -> Any:
    """The dependency that declares a route's scope: ``dependencies=[needs("read")]``
    (``per_owner=False``: the route acts across owners, so only a token for every owner)."""
    if scope not in SCOPES:
        raise ValueError(f"no such scope: {scope}")
    return Depends(Need(scope, per_owner))


#: What a /v1 route declaring no scope needs: ``admin`` for every owner.
CROSS_OWNER = Need("admin", per_owner=False)


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
            raise ProblemError("forbidden", "this route acts across owners; this token is limited to some")

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


def check_bind(api: ApiSettings) -> None:
    """Refuse settings that would expose the API: without credentials, or in plain
    HTTP, off loopback; blank, short or equal tokens; half a TLS pair.

    Raises:
        ConfigurationError: saying which setting to set.
    """
    for name in sorted(api.blank_credentials):
        raise ConfigurationError(f"{ApiSettings.env_name(name)} must not be blank: set a token, or leave it unset")
    gateway = _static(api.gateway_token, "MEMJOBS_API_GATEWAY_TOKEN")
    host = _static(api.host_token, "MEMJOBS_API_HOST_TOKEN")
    scoped = ScopedKeys(api)  # refuses blank, short or equal keys
    if (api.tls_cert is None) != (api.tls_key is None):
        raise ConfigurationError("set both MEMJOBS_API_TLS_CERT and MEMJOBS_API_TLS_KEY, or neither")
    if gateway is not None and host is not None and hmac.compare_digest(gateway, host):
        raise ConfigurationError("MEMJOBS_API_GATEWAY_TOKEN and MEMJOBS_API_HOST_TOKEN must differ")
    if is_loopback(api.host):
        return
    if not scoped.enabled and (gateway is None or host is None):
        raise ConfigurationError(
            f"MEMJOBS_API_HOST={api.host} is not a loopback address: set both "
            "MEMJOBS_API_GATEWAY_TOKEN and MEMJOBS_API_HOST_TOKEN, or MEMJOBS_API_TOKEN_KEY "
            "for scoped tokens (docs/security.md)"
        )
    if api.tls_cert is None and not api.tls_terminated_by_proxy:
        raise ConfigurationError(
            f"MEMJOBS_API_HOST={api.host} is not a loopback address: serve HTTPS "
            "(MEMJOBS_API_TLS_CERT and MEMJOBS_API_TLS_KEY), or set "
            "MEMJOBS_API_TLS_TERMINATED_BY_PROXY=true when a proxy in front terminates TLS "
            "(docs/security.md)"
        )


@dataclass(frozen=True)
class Tokens:
    """The configured credentials: static tokens as bytes (for :func:`hmac.compare_digest`)
    and the scoped tokens' keys."""

    gateway: bytes | None
    host: bytes | None
    scoped: ScopedKeys | None = None

    @classmethod
    def from_settings(cls, api: ApiSettings) -> Tokens:
        def raw(value: Any) -> bytes | None:
            return None if value is None else value.get_secret_value().encode()

        keys = ScopedKeys(api)
        return cls(raw(api.gateway_token), raw(api.host_token), keys if keys.enabled else None)

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
            return Principal("scoped", grant.scopes, None if grant.all_owners else grant.owners, grant.owner_prefix)
        raise _unauthorized()


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


def owner_id_of_header(value: str | None) -> str | None:
    """The owner id of a percent-encoded ``X-Memjobs-Owner`` (UTF-8, as
    ``encodeURIComponent`` writes it); None when absent or malformed. The one parser
    of that header: the GET routes, the route check and ``/mcp`` all use it."""
    if not value or len(value) > MAX_OWNER_HEADER:
        return None
    try:
        decoded = unquote(value, errors="strict")
        if "\x00" in decoded:
            return None
        owner_key(decoded)  # refuses what is no owner id
        return decoded
    except (ValueError, UnicodeDecodeError):
        return None


async def authorize(request: Request, need: Need) -> None:
    """The check of a route's declared :class:`Need`: the caller (authenticated by the
    guard) has the scope, then may act for the owner the request names.

    Raises:
        ProblemError: 403 ``forbidden``; 422/400 for a request that names no owner.
    """
    state = request.scope.setdefault("state", {})
    if state.get(AUTHORIZED):
        return
    principal: Principal | None = state.get(PRINCIPAL)
    if principal is None:  # not through the guard (an app built without it)
        principal = request.app.state.ctx.tokens.authenticate(request.headers.get("authorization"))
        state[PRINCIPAL] = principal
    assert principal is not None
    principal.require(need)
    if not principal.every_owner and need.per_owner:
        principal.require_owner(await _owner_named(request))
    state[AUTHORIZED] = True


async def _owner_named(request: Request) -> str:
    """The owner id a request names: ``X-Memjobs-Owner`` on a GET, ``owner_id`` in a body."""
    if request.method == "GET":
        owner = owner_id_of_header(request.headers.get("x-memjobs-owner"))
        if owner is None:
            raise ProblemError("validation", "X-Memjobs-Owner: must be a non-empty, percent-encoded UTF-8 owner id")
        return owner
    try:
        body = await request.json()
    except ValueError:
        raise ProblemError("malformed_json", "the body could not be parsed as JSON") from None
    named = body.get("owner_id") if isinstance(body, dict) else None
    if not isinstance(named, str) or not named:
        raise ProblemError("validation", "owner_id is required")
    return named
