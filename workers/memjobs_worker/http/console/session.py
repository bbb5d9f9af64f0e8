"""Who may use the console, and the CSRF token of its forms.

A browser cannot easily send an ``Authorization`` header, so the console keeps
its own session in a cookie (``memjobs_console``: HttpOnly, SameSite=Strict,
Path=/console, Secure over TLS). With the API open (loopback, no token set),
the first page sets it; with tokens, ``/console/login`` sets it once the host
token is typed in (the gateway token is refused: the console replays and
purges). The cookie holds a random session id, an expiry and an HMAC of them
under a random key that every API process shares through Redis, stored under a
name derived from the host token (:func:`~.live.signing_key`): so it carries no
secret, is honoured by every replica behind a load balancer, outlives a
restart, dies with a new host token, and cannot be forged. The key is random,
never derived from the token, so a cookie gives no way to guess the token
offline. A signed cookie is not enough on its own: the session must also still
be live in Redis (:mod:`~.live`), which logout ends.

Every form carries the session's CSRF token (an HMAC of the session id under
the same key) and a POST without it, or with another session's, is refused;
SameSite=Strict already keeps the cookie off cross-site requests.

Cookie values and CSRF tokens are checked against their exact shape (ASCII
only, fixed lengths) before any comparison, so a hostile value (non-ASCII,
too long, not base64) is simply no session, never an exception.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

from memjobs_worker.http.auth import Tokens

COOKIE = "memjobs_console"
#: How long a console session lasts.
SESSION_S = 12 * 3600
#: Random bytes of a session id (base64url: 24 characters).
SID_BYTES = 18

# The exact shapes: a base64url session id, a 10-digit expiry (seconds since the
# epoch, good until 2286), an HMAC-SHA256 in lower-case hex. Explicit character
# classes: ``\d`` and ``\w`` would match non-ASCII digits and letters.
_COOKIE_SHAPE = re.compile(r"([A-Za-z0-9_-]{24})\.([0-9]{10})\.([0-9a-f]{64})")
_MAC_SHAPE = re.compile(r"[0-9a-f]{64}")


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

    @property
    def open(self) -> bool:
        return self.tokens.open

    def new_session(self, now: float | None = None) -> tuple[Session, str]:
        """A fresh session and its cookie value (``now``: seconds since the epoch)."""
        now = time.time() if now is None else now
        session = Session(secrets.token_urlsafe(SID_BYTES), int(now + SESSION_S))
        return session, f"{session.sid}.{session.expires}.{self._mac('session', session.sid, str(session.expires))}"

    def session(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session a cookie value proves, or None (absent, malformed, forged, expired).

        Whether it was logged out is Redis's to say (:class:`~.live.LiveSessions`).
        """
        shape = _COOKIE_SHAPE.fullmatch(cookie or "")
        if shape is None:
            return None
        sid, expires, mac = shape.groups()
        if not hmac.compare_digest(mac, self._mac("session", sid, expires)):
            return None
        if int(expires) < (time.time() if now is None else now):
            return None
        return Session(sid, int(expires))

    def csrf(self, session: Session) -> str:
        return self._mac("csrf", session.sid)

    def csrf_ok(self, session: Session, presented: str | None) -> bool:
        """True for this session's CSRF token; False for anything else, whatever its shape."""
        if _MAC_SHAPE.fullmatch(presented or "") is None:
            return False
        return hmac.compare_digest(str(presented), self.csrf(session))

    def _mac(self, *parts: str) -> str:
        return hmac.new(self._key, "|".join(parts).encode(), hashlib.sha256).hexdigest()
