"""The console's signing key is shared through Redis by every API process.

Two API servers on one Redis stand for two replicas behind a load balancer with
no session affinity: a cookie and CSRF token issued by one are honoured by the
other, and a logout on one ends the session on both. A different host token
is a different key, so its replica refuses the other's cookies (log out
everywhere). With Redis down when the key is first needed, the console answers
its 503 page, never a 500.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import redis

from memjobs_worker.embedded import EmbeddedRedis
from memjobs_worker.http.console.live import KEY_BYTES, signing_key_name
from tests.http.test_console_session import (  # noqa: F401  (api_on_own_redis: a fixture)
    TOKENS,
    api_on_own_redis,
    csrf_of,
    log_in,
    log_out,
    redis_of,
    send,
)
from tests.support.http import HOST_TOKEN, Api
from tests.support.polling import wait_for

OTHER_HOST_TOKEN = "another-host-token-0123456789abcdef"


def replicas(api_factory: Callable[..., Api], tmp_path: Path, **tokens: str) -> tuple[Api, Api]:
    """Two API servers on the test Redis: ``a`` with :data:`TOKENS`, ``b`` with ``tokens``
    over them (each its own data directory)."""
    a = api_factory(worker=False, data_dir=tmp_path / "a", **TOKENS)
    b = api_factory(worker=False, data_dir=tmp_path / "b", **{**TOKENS, **tokens})
    return a, b


def test_a_cookie_and_csrf_token_from_one_replica_are_honoured_by_the_other(
    api_factory: Callable[..., Api], tmp_path: Path
) -> None:
    a, b = replicas(api_factory, tmp_path)
    cookie = log_in(a)
    csrf = csrf_of(a, cookie)
    assert csrf_of(b, cookie) == csrf  # the page b renders carries the same token
    done = send(
        b, "POST", "/console/dead-letters/purge", cookie=cookie.encode(), body=f"csrf={csrf}&back=dead".encode()
    )
    assert done.status == 303 and done.location.startswith("/console/dead-letters?done=purged")
    other = log_in(b)
    assert send(a, "GET", "/console", cookie=other.encode()).status == 200


def test_a_logout_on_one_replica_ends_the_session_on_the_other(api_factory: Callable[..., Api], tmp_path: Path) -> None:
    a, b = replicas(api_factory, tmp_path)
    cookie = log_in(a)
    csrf = csrf_of(a, cookie)
    assert log_out(b, cookie).status == 303
    for api in (a, b):
        page = send(api, "GET", "/console", cookie=cookie.encode())
        assert page.status == 303 and page.location == "/console/login"
        action = send(api, "POST", "/console/dead-letters/purge", cookie=cookie.encode(), body=f"csrf={csrf}".encode())
        assert action.status == 403 and "logged out" in action.text


def test_a_different_host_token_refuses_the_others_cookies(api_factory: Callable[..., Api], tmp_path: Path) -> None:
    a, b = replicas(api_factory, tmp_path, api_host_token=OTHER_HOST_TOKEN)
    cookie = log_in(a)
    csrf = csrf_of(a, cookie)
    page = send(b, "GET", "/console", cookie=cookie.encode())
    assert page.status == 303 and page.location == "/console/login"
    action = send(b, "POST", "/console/dead-letters/purge", cookie=cookie.encode(), body=f"csrf={csrf}".encode())
    assert action.status == 403
    assert send(a, "GET", "/console", cookie=cookie.encode()).status == 200  # a still honours it


def test_the_key_is_random_stored_without_ttl_under_a_name_from_the_tokens_hash(
    api_factory: Callable[..., Api], tmp_path: Path
) -> None:
    a, _ = replicas(api_factory, tmp_path)
    log_in(a)
    name = signing_key_name(HOST_TOKEN.encode())
    assert name == f"memjobs:console:key:{hashlib.sha256(HOST_TOKEN.encode()).hexdigest()[:16]}"
    client: redis.Redis = redis_of(a)
    key = client.get(name)
    assert isinstance(key, bytes) and len(key) == KEY_BYTES
    assert client.ttl(name) == -1
    assert HOST_TOKEN.encode() not in key and hashlib.sha256(HOST_TOKEN.encode()).digest() != key
    assert signing_key_name(None) == "memjobs:console:key:open"


def test_redis_down_when_the_key_is_first_needed_is_the_503_page(
    api_on_own_redis: Api,  # noqa: F811
    own_redis: EmbeddedRedis,
) -> None:
    api = api_on_own_redis
    own_redis.stop()  # before any console request: no key read yet

    assert send(api, "GET", "/console/login").status == 200  # the form needs no key
    wrong = send(api, "POST", "/console/login", body=b"token=not-the-host-token")
    assert wrong.status == 403  # a wrong token is refused without Redis
    for refused in (
        send(api, "POST", "/console/login", body=f"token={HOST_TOKEN}".encode()),
        send(api, "GET", "/console"),
        send(api, "POST", "/console/dead-letters/purge", body=b"csrf=" + b"0" * 64),
    ):
        assert refused.status == 503 and refused.headers["retry-after"] == "5"
        assert "text/html" in refused.headers["content-type"]
        assert "Redis is not answering" in refused.text
        assert refused.headers.get_all("set-cookie") is None

    own_redis.start()  # back: the key is read (and created) once Redis answers the API again
    wait_for(
        lambda: send(api, "POST", "/console/login", body=f"token={HOST_TOKEN}".encode()).status != 503,
        30,
        "the console to reach the restarted Redis",
        poll_s=0.2,
    )
    cookie = log_in(api)
    assert send(api, "GET", "/console", cookie=cookie.encode()).status == 200
