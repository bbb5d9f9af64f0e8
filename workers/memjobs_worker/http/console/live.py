"""The console sessions that are still live, in Redis: what logout ends.

A signed cookie (:mod:`~.session`) proves that this API issued it, not that
its user is still logged in. Each session therefore also has a key
``memjobs:console:session:<session id>`` whose TTL is the session's remaining
life (so Redis forgets it when the cookie would expire anyway); logout deletes
the key, and from that moment a copy of the cookie proves nothing. The key's
value is unused: its existence is the whole record.

The key that signs cookies and CSRF tokens lives here too, so that every API
process (two replicas behind a load balancer, or one restarted) accepts the
others' cookies: :func:`signing_key`.

Redis errors become :class:`~memjobs_client.errors.BackendUnavailable`; the
routes then refuse (fail closed), they never fall back to the signature alone.
"""

from __future__ import annotations

import hashlib
import secrets
import time

import redis

from memjobs_client import keys
from memjobs_client.errors import BackendUnavailable
from memjobs_client.redis_seam import redis_errors
from memjobs_worker.http.console.session import Session

#: Prefix of the live-session keys (``<prefix><session id>``).
PREFIX = f"{keys.NAMESPACE}:console:session:"


#: Prefix of the signing keys' names (``<prefix><first 16 hex of sha256(host token)>``).
KEY_PREFIX = f"{keys.NAMESPACE}:console:key:"
#: Random bytes of a signing key.
KEY_BYTES = 32


def session_key(sid: str) -> str:
    return f"{PREFIX}{sid}"


def signing_key_name(host_token: bytes | None) -> str:
    """The Redis name of the signing key for this host token (``open`` without one).

    A new host token is a new name, hence a new key: every older cookie fails its
    signature (log out everywhere). The name shows 64 bits of the token's hash,
    nothing an attacker can use against a random token of 32+ characters.
    """
    suffix = "open" if host_token is None else hashlib.sha256(host_token).hexdigest()[:16]
    return f"{KEY_PREFIX}{suffix}"


def signing_key(client: redis.Redis, host_token: bytes | None) -> bytes:
    """The console's signing key, shared by every API process on this Redis.

    The first process to ask stores :data:`KEY_BYTES` random bytes (``SET NX``, so
    two processes starting together agree on one); every other reads them. The key
    has no TTL: it must outlive every cookie it signed and every process that
    cached it, and a key that expired under running replicas would split them (each
    drawing its own). It is random, never derived from the token, so a cookie is no
    oracle for guessing the token offline.

    Raises:
        BackendUnavailable: Redis did not answer, or holds something else there.
    """
    name = signing_key_name(host_token)
    with redis_errors("Redis did not give the console's signing key"):
        client.set(name, secrets.token_bytes(KEY_BYTES), nx=True)
        key = client.get(name)
    if not isinstance(key, bytes) or len(key) != KEY_BYTES:
        raise BackendUnavailable(f"Redis holds no {KEY_BYTES}-byte console signing key at {name}")
    return key


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
        with redis_errors("Redis did not record the console session"):
            self.client.set(session_key(session.sid), b"1", ex=ttl_s)

    def alive(self, session: Session) -> bool:
        """True while ``session`` was neither logged out nor forgotten by Redis.

        Raises:
            BackendUnavailable: Redis did not answer.
        """
        with redis_errors("Redis did not answer the session check"):
            return bool(self.client.exists(session_key(session.sid)))

    def end(self, session: Session) -> None:
        """Log ``session`` out: its cookie proves nothing from now on.

        Raises:
            BackendUnavailable: Redis did not answer (the session is still live).
        """
        with redis_errors("Redis did not end the console session"):
            self.client.delete(session_key(session.sid))
