"""Who may use the console, and the CSRF token of its forms.

A browser cannot easily send an ``Authorization`` header, so the console keeps
its own session in a cookie (``memjobs_console``: HttpOnly, SameSite=Strict,
Path=/console, Secure over TLS). With the API open (loopback, no token set),
the first page sets it; with tokens, ``/console/login`` sets it once the host
token is typed in (the gateway token is refused: the console replays and
purges). The cookie holds a random session id, an expiry and an HMAC of them
under a key drawn when the app starts and bound to the host token, so it
carries no secret, dies with the process or a new token, and cannot be forged.

Every form carries the session's CSRF token (an HMAC of the session id under
the same key) and a POST without it, or with another session's, is refused;
SameSite=Strict already keeps the cookie off cross-site requests.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from memjobs_worker.http.auth import Tokens

COOKIE = "memjobs_console"
#: How long a console session lasts.
SESSION_S = 12 * 3600


@dataclass(frozen=True)
class Session:
    sid: str
    expires: int


class ConsoleKeys:
    """Signs session cookies and CSRF tokens for one app instance.

    Parameters:
        tokens: the API's tokens (open: no login; else the host token logs in).
    """

    def __init__(self, tokens: Tokens) -> None:
        self.tokens = tokens
        self._key = hmac.new(secrets.token_bytes(32), tokens.host or b"open", hashlib.sha256).digest()

    @property
    def open(self) -> bool:
        return self.tokens.open

    def is_host_token(self, presented: str) -> bool:
        """True for the host token (constant time)."""
        host = self.tokens.host
        return host is not None and hmac.compare_digest(presented.strip().encode(), host)

    def new_session(self, now: float | None = None) -> tuple[Session, str]:
        """A fresh session and its cookie value."""
        session = Session(secrets.token_urlsafe(18), int((now or time.time()) + SESSION_S))
        return session, f"{session.sid}.{session.expires}.{self._mac('session', session.sid, str(session.expires))}"

    def session(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session a cookie value proves, or None (absent, forged, expired)."""
        if not cookie:
            return None
        sid, _, rest = cookie.partition(".")
        expires, _, mac = rest.partition(".")
        if not sid or not expires.isdigit() or not mac:
            return None
        if not hmac.compare_digest(mac, self._mac("session", sid, expires)):
            return None
        if int(expires) < (now or time.time()):
            return None
        return Session(sid, int(expires))

    def csrf(self, session: Session) -> str:
        return self._mac("csrf", session.sid)

    def csrf_ok(self, session: Session, presented: str | None) -> bool:
        return bool(presented) and hmac.compare_digest(str(presented), self.csrf(session))

    def _mac(self, *parts: str) -> str:
        return hmac.new(self._key, "|".join(parts).encode(), hashlib.sha256).hexdigest()
