"""Scoped tokens: signed, expiring JWTs that name the owners a caller may act
for and what it may do (docs/security.md).

What: :func:`issue` signs a token (HS256, PyJWT) with ``api_token_key``;
:class:`ScopedKeys` verifies one against that key and, during a rotation,
``api_token_previous_key`` (two keys valid at once). A token carries:

- ``scope``: space-separated, from :data:`SCOPES`;
- the owners: ``owners`` (exact owner ids), ``owner_prefix`` (every owner id
  that starts with it: a tenant such as ``acme:``), or ``all_owners``;
- ``exp`` (always), ``iat``, ``sub`` (a label saying whom it was issued to,
  never an owner), ``iss``/``aud`` (``memjobs``/``memjobs-api``), ``jti``.

Why beside the gateway and host tokens: one leaked static token exposes every
owner; a scoped token exposes only what it names, and only until it expires.
The keys are secrets (``SecretStr``), never logged; a token is never logged.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass

from memjobs_client.errors import ConfigurationError
from memjobs_worker.settings import ApiSettings

ISSUER = "memjobs"
AUDIENCE = "memjobs-api"
ALGORITHM = "HS256"
#: What a token may be allowed to do; the routes each need one (auth.ROUTE_SCOPES).
SCOPES = ("read", "write", "forget", "session", "knowledge", "admin")
#: The shortest signing key accepted (HS256 wants at least the hash's 32 bytes).
MIN_KEY_CHARS = 32
#: The longest life ``memjobs token issue`` gives a token.
MAX_TTL_S = 366 * 24 * 3600
#: Clock skew tolerated between the issuer and the API.
LEEWAY_S = 30


class InvalidToken(Exception):
    """The token is not one of ours, is expired or is malformed (the message says which,
    without quoting the token)."""


@dataclass(frozen=True)
class Grant:
    """What a verified token allows: scopes, and for which owners."""

    subject: str
    scopes: frozenset[str]
    owners: frozenset[str]
    owner_prefix: str | None
    all_owners: bool
    expires_at: int

    def covers(self, owner_id: str) -> bool:
        """True when the token may act for ``owner_id``."""
        if self.all_owners or owner_id in self.owners:
            return True
        return self.owner_prefix is not None and owner_id.startswith(self.owner_prefix)


def _key_value(secret: object | None, name: str) -> bytes | None:
    if secret is None:
        return None
    value: str = secret.get_secret_value()  # type: ignore[attr-defined]
    if not value.strip() or value != value.strip():
        raise ConfigurationError(f"{name} must not be blank or start or end with spaces")
    if len(value) < MIN_KEY_CHARS:
        raise ConfigurationError(f"{name} must be at least {MIN_KEY_CHARS} characters")
    return value.encode()


class ScopedKeys:
    """The keys that verify scoped tokens (none set: scoped tokens are not accepted).

    Raises:
        ConfigurationError: a blank or short key, a previous key without a current
            one, or the two keys equal.
    """

    def __init__(self, api: ApiSettings) -> None:
        current = _key_value(api.token_key, "MEMJOBS_API_TOKEN_KEY")
        previous = _key_value(api.token_previous_key, "MEMJOBS_API_TOKEN_PREVIOUS_KEY")
        if previous is not None and current is None:
            raise ConfigurationError("MEMJOBS_API_TOKEN_PREVIOUS_KEY is set without MEMJOBS_API_TOKEN_KEY")
        if previous is not None and previous == current:
            raise ConfigurationError("MEMJOBS_API_TOKEN_KEY and MEMJOBS_API_TOKEN_PREVIOUS_KEY must differ")
        self._keys = tuple(k for k in (current, previous) if k is not None)

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def verify(self, token: str, now: float | None = None) -> Grant:
        """The grant of a token signed by either key.

        Raises:
            InvalidToken: no key set, a bad signature, expired, or malformed claims.
        """
        if not self._keys:
            raise InvalidToken("scoped tokens are not enabled on this server")
        import jwt  # here: PyJWT and its cryptography (8 MB) only in an API that takes scoped tokens

        claims: dict[str, object] | None = None
        for key in self._keys:
            try:
                claims = jwt.decode(
                    token,
                    key,
                    algorithms=[ALGORITHM],
                    audience=AUDIENCE,
                    issuer=ISSUER,
                    leeway=LEEWAY_S,
                    options={"require": ["exp", "iat", "scope"]},
                )
                break
            except jwt.InvalidSignatureError:
                continue
            except jwt.ExpiredSignatureError:
                raise InvalidToken("the token has expired") from None
            except jwt.PyJWTError:
                raise InvalidToken("the token is malformed") from None
        if claims is None:
            raise InvalidToken("the token's signature does not verify")
        return _grant(claims)


def _grant(claims: dict[str, object]) -> Grant:
    scope = claims.get("scope")
    owners = claims.get("owners", [])
    prefix = claims.get("owner_prefix")
    all_owners = claims.get("all_owners", False)
    if (
        not isinstance(scope, str)
        or not isinstance(owners, list)
        or not all(isinstance(o, str) and o for o in owners)
        or not (prefix is None or (isinstance(prefix, str) and prefix))
        or not isinstance(all_owners, bool)
    ):
        raise InvalidToken("the token's claims are malformed")
    scopes = frozenset(scope.split())
    if not scopes or not scopes <= set(SCOPES):
        raise InvalidToken("the token's scopes are malformed")
    exp = claims.get("exp")
    return Grant(
        subject=str(claims.get("sub", "")),
        scopes=scopes,
        owners=frozenset(owners),
        owner_prefix=prefix,
        all_owners=all_owners,
        expires_at=int(exp) if isinstance(exp, int | float) else 0,
    )


def issue(
    api: ApiSettings,
    *,
    scopes: Iterable[str],
    owners: Iterable[str] = (),
    owner_prefix: str | None = None,
    all_owners: bool = False,
    ttl_s: int = 3600,
    subject: str = "",
    now: float | None = None,
) -> str:
    """A token signed with ``api_token_key``.

    Raises:
        ConfigurationError: no signing key, unknown scopes, no owners named (or
            owners named together with ``all_owners``), a lifetime out of range.
    """
    keys = ScopedKeys(api)
    if not keys.enabled:
        raise ConfigurationError("set MEMJOBS_API_TOKEN_KEY to issue scoped tokens")
    wanted = sorted(set(scopes))
    unknown = [s for s in wanted if s not in SCOPES]
    if not wanted or unknown:
        raise ConfigurationError(f"scopes must be among {', '.join(SCOPES)}")
    named = sorted(set(owners))
    if any(not o for o in named) or owner_prefix == "":
        raise ConfigurationError("an owner id or prefix must not be empty")
    if all_owners == bool(named or owner_prefix):
        raise ConfigurationError("name the owners (--owner, --owner-prefix) or --all-owners, not both")
    if not 1 <= ttl_s <= MAX_TTL_S:
        raise ConfigurationError(f"the lifetime must be between 1 s and {MAX_TTL_S} s")
    issued = int(now if now is not None else time.time())
    claims: dict[str, object] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": subject,
        "iat": issued,
        "exp": issued + ttl_s,
        "jti": secrets.token_urlsafe(12),
        "scope": " ".join(wanted),
    }
    if all_owners:
        claims["all_owners"] = True
    if named:
        claims["owners"] = named
    if owner_prefix:
        claims["owner_prefix"] = owner_prefix
    import jwt

    return jwt.encode(claims, keys._keys[0], algorithm=ALGORITHM)
