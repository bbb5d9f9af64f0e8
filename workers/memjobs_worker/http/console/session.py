"""Who may use the console, and the CSRF token of its forms.

A browser cannot easily send an ``Authorization`` header, so the console keeps
its own session in a cookie (``memjobs_console``: HttpOnly, SameSite=Strict,
Path=/console, Secure over TLS). With the API open (loopback, no token set),
the first page sets it; with tokens, ``/console/login`` sets it once the host
token is typed in (the gateway token is refused: the console replays and
purges). The cookie holds a random session id and the time it was issued,
signed by itsdangerous (:class:`~itsdangerous.TimestampSigner`, HMAC-SHA256)
under a random key that every API process shares through Redis, stored under a
name derived from the host token (:func:`~.live.signing_key`): so it carries no
secret, is honoured by every replica behind a load balancer, outlives a
restart, dies with a new host token, and cannot be forged. The key is random,
never derived from the token, so a cookie gives no way to guess the token
offline. A signed cookie is not enough on its own: the session must also still
be live in Redis (:mod:`~.live`), which logout ends.

Every form carries the session's CSRF token (the signature of the session id
under the same key, salted for that purpose alone, so a token is never a valid
cookie signature nor the reverse) and a POST without it, or with another
session's, is refused; SameSite=Strict already keeps the cookie off cross-site
requests.

Cookie values and CSRF tokens are checked against their shape (base64url
ASCII, bounded lengths) before itsdangerous reads them, so a hostile value
(non-ASCII, too long, not base64) is simply no session, never an exception,
and each signature has one spelling (itsdangerous's decoder would skip
characters outside the alphabet).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

from itsdangerous import BadData, Signer, TimestampSigner

from memjobs_worker.http.auth import Tokens

COOKIE = "memjobs_console"
#: How long a console session lasts.
SESSION_S = 12 * 3600
#: Random bytes of a session id (base64url: 24 characters).
SID_BYTES = 18

#: The salts that keep the two uses of the key apart.
SESSION_SALT = "memjobs.console.session"
CSRF_SALT = "memjobs.console.csrf"

# The shapes: a base64url session id, the issue time (itsdangerous's base64url of
# its bytes: 6 characters until 2106) and an HMAC-SHA256 in base64url (43
# characters). Explicit character classes: ``\w`` would match non-ASCII letters.
_COOKIE_SHAPE = re.compile(r"[A-Za-z0-9_-]{24}\.[A-Za-z0-9_-]{1,12}\.[A-Za-z0-9_-]{43}")
_SIGNATURE_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")


@dataclass(frozen=True)
class Session:
    sid: str
    #: Seconds since the epoch.
    expires: int


def is_host_token(tokens: Tokens, presented: str) -> bool:
    """True for the host token (constant time); checked before the signing key is
    needed, so a wrong token is refused even with Redis down."""
    host = tokens.host
    return host is not None and hmac.compare_digest(presented.strip().encode(), host)


class _SessionSigner(TimestampSigner):
    """The session cookie's signer, its clock set to ``now`` (seconds since the epoch)."""

    def __init__(self, key: bytes, now: float) -> None:
        super().__init__(key, salt=SESSION_SALT, key_derivation="hmac", digest_method=hashlib.sha256)
        self.now = now

    def get_timestamp(self) -> int:
        return int(self.now)


class ConsoleKeys:
    """Signs session cookies and CSRF tokens.

    Parameters:
        tokens: the API's tokens (open: no login; else the host token logs in).
        key: the signing key (random bytes), the same in every API process that
            must accept the others' cookies (:func:`~.live.signing_key`).
    """

    def __init__(self, tokens: Tokens, key: bytes) -> None:
        self.tokens = tokens
        self._key = key
        self._csrf = Signer(key, salt=CSRF_SALT, key_derivation="hmac", digest_method=hashlib.sha256)

    @property
    def open(self) -> bool:
        return self.tokens.open

    def new_session(self, now: float | None = None) -> tuple[Session, str]:
        """A fresh session and its cookie value (``now``: seconds since the epoch)."""
        issued = int(time.time() if now is None else now)
        session = Session(secrets.token_urlsafe(SID_BYTES), issued + SESSION_S)
        return session, _SessionSigner(self._key, issued).sign(session.sid).decode()

    def session(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session a cookie value proves, or None (absent, malformed, forged, expired).

        Whether it was logged out is Redis's to say (:class:`~.live.LiveSessions`).
        """
        if cookie is None or _COOKIE_SHAPE.fullmatch(cookie) is None:
            return None
        now = time.time() if now is None else now
        try:
            sid, issued = _SessionSigner(self._key, now).unsign(cookie, return_timestamp=True)
        except BadData:
            return None
        # Expiry checked here rather than by ``max_age``, which also refuses a cookie
        # issued "in the future": one from a replica whose clock runs a little ahead.
        expires = int(issued.timestamp()) + SESSION_S
        if expires < now:
            return None
        return Session(sid.decode(), expires)

    def csrf(self, session: Session) -> str:
        return self._csrf.get_signature(session.sid).decode()

    def csrf_ok(self, session: Session, presented: str | None) -> bool:
        """True for this session's CSRF token; False for anything else, whatever its shape."""
        if presented is None or _SIGNATURE_SHAPE.fullmatch(presented) is None:
            return False
        return self._csrf.verify_signature(session.sid, presented)
