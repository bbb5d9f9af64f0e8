"""Who may call: bearer tokens from settings, compared in constant time.

Two tiers, as the seeds draw them: the **gateway** token opens the personal
memory, session and read routes; the **host** token opens those and also
knowledge re-indexing (only the host starts ingestion). With neither token set
the API is open, which :func:`check_bind` allows on a loopback address only.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from typing import Literal

from fastapi import Request

from memjobs_client.errors import ConfigurationError
from memjobs_worker.http.problems import ProblemError
from memjobs_worker.settings import Settings

Tier = Literal["gateway", "host"]


def is_loopback(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ::1 (what may run without tokens)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings) -> None:
    """Refuse settings that would expose the API without tokens, or half a TLS pair.

    Raises:
        ConfigurationError: non-loopback bind without both tokens; equal tokens;
            a certificate without a key or the reverse.
    """
    gateway, host = settings.api_gateway_token, settings.api_host_token
    if not is_loopback(settings.api_host) and (gateway is None or host is None):
        raise ConfigurationError(
            f"MEMJOBS_API_HOST={settings.api_host} is not a loopback address: set both "
            "MEMJOBS_API_GATEWAY_TOKEN and MEMJOBS_API_HOST_TOKEN (and serve TLS, or put the API "
            "behind a TLS proxy)")
    for token, name in ((gateway, "MEMJOBS_API_GATEWAY_TOKEN"), (host, "MEMJOBS_API_HOST_TOKEN")):
        if token is not None and len(token.get_secret_value()) < 16:
            raise ConfigurationError(f"{name} must be at least 16 characters")
    if gateway is not None and host is not None and hmac.compare_digest(
            gateway.get_secret_value().encode(), host.get_secret_value().encode()):
        raise ConfigurationError("MEMJOBS_API_GATEWAY_TOKEN and MEMJOBS_API_HOST_TOKEN must differ")
    if (settings.api_tls_cert is None) != (settings.api_tls_key is None):
        raise ConfigurationError("set both MEMJOBS_API_TLS_CERT and MEMJOBS_API_TLS_KEY, or neither")


@dataclass(frozen=True)
class Tokens:
    """The configured tokens, as bytes for :func:`hmac.compare_digest`."""

    gateway: bytes | None
    host: bytes | None

    @classmethod
    def from_settings(cls, settings: Settings) -> Tokens:
        def raw(value: object) -> bytes | None:
            return None if value is None else value.get_secret_value().encode()  # type: ignore[attr-defined]

        return cls(raw(settings.api_gateway_token), raw(settings.api_host_token))

    @property
    def open(self) -> bool:
        return self.gateway is None and self.host is None

    def authorize(self, header: str | None, tier: Tier) -> None:
        """Raise a problem unless the ``Authorization`` header opens ``tier``."""
        if self.open:
            return
        presented = _bearer(header)
        if presented is None:
            raise ProblemError("unauthorized", headers={"WWW-Authenticate": "Bearer"})
        # Compare against both tokens every time: the timing says nothing of which matched.
        is_host = self.host is not None and hmac.compare_digest(presented, self.host)
        is_gateway = self.gateway is not None and hmac.compare_digest(presented, self.gateway)
        if is_host:
            return
        if is_gateway:
            if tier == "gateway":
                return
            raise ProblemError("forbidden", "this route needs the host token")
        raise ProblemError("unauthorized", headers={"WWW-Authenticate": "Bearer"})


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
    """Dependency: the gateway (or host) token (async: FastAPI would run a sync one on a thread)."""
    request.app.state.ctx.tokens.authorize(request.headers.get("authorization"), "gateway")


async def host(request: Request) -> None:
    """Dependency: the host token."""
    request.app.state.ctx.tokens.authorize(request.headers.get("authorization"), "host")
