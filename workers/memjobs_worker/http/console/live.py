"""The console sessions that are still live, in Redis: what logout ends.

A signed cookie (:mod:`~.session`) proves that this API issued it, not that
its user is still logged in. Each session therefore also has a key
``memjobs:console:session:<session id>`` whose TTL is the session's remaining
life (so Redis forgets it when the cookie would expire anyway); logout deletes
the key, and from that moment a copy of the cookie proves nothing. The key's
value is unused: its existence is the whole record.

Redis errors become :class:`~memjobs_client.errors.BackendUnavailable`; the
routes then refuse (fail closed), they never fall back to the signature alone.
"""

from __future__ import annotations

import time

import redis

from memjobs_client import keys
from memjobs_client.errors import BackendUnavailable
from memjobs_worker.http.console.session import Session

#: Prefix of the live-session keys (``<prefix><session id>``).
PREFIX = f"{keys.NAMESPACE}:console:session:"


def session_key(sid: str) -> str:
    return f"{PREFIX}{sid}"


class LiveSessions:
    """Starts, checks and ends console sessions in Redis.

    Parameters:
        client: the API's Redis client (bounded by the backend timeout).
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def start(self, session: Session, now: float | None = None) -> None:
        """Record ``session`` as live until it expires.

        Raises:
            BackendUnavailable: Redis did not answer (or refused the write).
        """
        ttl_s = max(1, session.expires - int(time.time() if now is None else now))
        try:
            self.client.set(session_key(session.sid), b"1", ex=ttl_s)
        except redis.RedisError as exc:
            raise BackendUnavailable(f"Redis did not record the console session: {exc}") from exc

    def alive(self, session: Session) -> bool:
        """True while ``session`` was neither logged out nor forgotten by Redis.

        Raises:
            BackendUnavailable: Redis did not answer.
        """
        try:
            return bool(self.client.exists(session_key(session.sid)))
        except redis.RedisError as exc:
            raise BackendUnavailable(f"Redis did not answer the session check: {exc}") from exc

    def end(self, session: Session) -> None:
        """Log ``session`` out: its cookie proves nothing from now on.

        Raises:
            BackendUnavailable: Redis did not answer (the session is still live).
        """
        try:
            self.client.delete(session_key(session.sid))
        except redis.RedisError as exc:
            raise BackendUnavailable(f"Redis did not end the console session: {exc}") from exc
