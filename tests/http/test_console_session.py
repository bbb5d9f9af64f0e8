"""The console's session over real HTTP (issue 31, item 4).

Logout ends the session in Redis, so a copy of the cookie is refused from then
on; the cookie is ``Secure`` exactly when the browser spoke HTTPS (uvicorn
serving TLS, a listed proxy's ``X-Forwarded-Proto``, or a TLS proxy declared
the only way in); any malformed, forged, expired or logged-out cookie, and any
malformed CSRF token, is a 403 and never a 500; and with Redis down the
console refuses with a page saying so. Requests go through ``http.client``
with raw header and body bytes (httpx refuses non-ASCII header values).
"""

from __future__ import annotations

import http.client
import re
import secrets
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from memjobs_worker.embedded import EmbeddedRedis
from memjobs_worker.http.auth import Tokens
from memjobs_worker.http.console.live import session_key, signing_key
from memjobs_worker.http.console.session import COOKIE, SESSION_S, ConsoleKeys
from memjobs_worker.settings import Settings
from tests.http.test_http_limits import certificate  # noqa: F401  (fixture: a self-signed pair)
from tests.support.http import HOST_TOKEN, Api

TOKENS = {"api_gateway_token": "gateway-token-0123456789abcdef", "api_host_token": HOST_TOKEN}
FORM = "application/x-www-form-urlencoded"


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    text: str

    @property
    def location(self) -> str:
        return self.headers.get("location", "")

    def set_cookie(self) -> tuple[str, dict[str, str]]:
        """The console cookie this reply sets: its value and its attributes (lower-case names)."""
        lines: list[str] = self.headers.get_all("set-cookie") or []
        [line] = [c for c in lines if c.startswith(f"{COOKIE}=")]
        first, *attributes = (part.strip() for part in line.split(";"))
        return first.partition("=")[2], {k.lower(): v for k, _, v in (a.partition("=") for a in attributes)}


def send(
    api: Api,
    method: str,
    path: str,
    *,
    cookie: bytes | None = None,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    source: str = "127.0.0.1",
) -> Reply:
    """One request on a new connection from ``source``, cookie and body sent as raw bytes."""
    port = int(api.url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", "127.0.0.1")
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        if cookie is not None:
            conn.putheader("Cookie", f"{COOKIE}=".encode() + cookie)
        if body is not None:
            conn.putheader("Content-Type", FORM)
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        return Reply(response.status, response.headers, response.read().decode("utf-8", "replace"))
    finally:
        conn.close()


def log_in(api: Api) -> str:
    reply = send(api, "POST", "/console/login", body=f"token={HOST_TOKEN}".encode())
    assert reply.status == 303 and reply.location == "/console", (reply.status, reply.text)
    return reply.set_cookie()[0]


def csrf_of(api: Api, cookie: str) -> str:
    page = send(api, "GET", "/console", cookie=cookie.encode())
    assert page.status == 200, page.status
    tokens: set[str] = set(re.findall(r'name="csrf" value="([^"]*)"', page.text))
    [token] = tokens
    return token


def log_out(api: Api, cookie: str) -> Reply:
    return send(api, "POST", "/console/logout", cookie=cookie.encode(), body=f"csrf={csrf_of(api, cookie)}".encode())


def keys_of(api: Api) -> ConsoleKeys:
    """The running API's signing keys: its tokens and the key it shares through Redis."""
    tokens = Tokens.from_settings(api.harness.settings.api)
    return ConsoleKeys(tokens, signing_key(redis_of(api), tokens.host))


def redis_of(api: Api) -> redis.Redis:
    client: redis.Redis = api.harness.runtime.redis
    return client


# -- logout ---------------------------------------------------------------------------------


def test_a_cookie_copied_before_logout_is_refused_after_it(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, **TOKENS)
    cookie = log_in(api)
    copy = cookie.encode()  # what a thief (or a shared machine's history) kept
    csrf = csrf_of(api, cookie)
    session = keys_of(api).session(cookie)
    assert session is not None
    sid = session.sid
    assert SESSION_S - 60 < redis_of(api).ttl(session_key(sid)) <= SESSION_S

    out = log_out(api, cookie)
    assert out.status == 303 and out.location == "/console/login"
    value, attributes = out.set_cookie()
    assert value in ("", '""') and attributes["max-age"] == "0"
    assert redis_of(api).exists(session_key(sid)) == 0

    replayed = send(api, "GET", "/console", cookie=copy)
    assert replayed.status == 303 and replayed.location == "/console/login"
    action = send(api, "POST", "/console/dead-letters/purge", cookie=copy, body=f"csrf={csrf}&back=dead".encode())
    assert action.status == 403 and "logged out" in action.text
    assert send(api, "POST", "/console/logout", cookie=copy, body=f"csrf={csrf}".encode()).status == 403


def test_logging_out_one_session_leaves_the_others(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, **TOKENS)
    laptop, phone = log_in(api), log_in(api)
    assert log_out(api, laptop).status == 303
    assert send(api, "GET", "/console", cookie=laptop.encode()).status == 303
    assert send(api, "GET", "/console", cookie=phone.encode()).status == 200


# -- Secure, HttpOnly, SameSite -------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "overrides", "source", "forwarded_proto", "secure"),
    [
        ("https through the listed proxy", {"api_forwarded_allow_ips": "127.0.0.1"}, "127.0.0.1", "https", True),
        ("the header from an unlisted address", {"api_forwarded_allow_ips": "127.0.0.1"}, "127.0.0.2", "https", False),
        ("no proxy listed: the header ignored", {}, "127.0.0.1", "https", False),
        ("plain http through the listed proxy", {"api_forwarded_allow_ips": "127.0.0.1"}, "127.0.0.1", "http", False),
        ("plain http, no proxy", {}, "127.0.0.1", None, False),
        ("a TLS proxy declared the only way in", {"api_tls_terminated_by_proxy": True}, "127.0.0.1", None, True),
    ],
)
@pytest.mark.parametrize("door", ["login", "open"])
def test_the_cookie_is_secure_exactly_when_the_browser_spoke_https(
    api_factory: Callable[..., Api],
    case: str,
    overrides: dict[str, Any],
    source: str,
    forwarded_proto: str | None,
    secure: bool,
    door: str,
) -> None:
    api = api_factory(worker=False, **overrides, **(TOKENS if door == "login" else {}))
    headers = {"X-Forwarded-Proto": forwarded_proto} if forwarded_proto else {}
    if door == "login":
        reply = send(api, "POST", "/console/login", body=f"token={HOST_TOKEN}".encode(), headers=headers, source=source)
        assert reply.status == 303
    else:  # loopback, no token: the first page sets the cookie
        reply = send(api, "GET", "/console", headers=headers, source=source)
        assert reply.status == 200
    _, attributes = reply.set_cookie()
    assert ("secure" in attributes) is secure, case
    assert "httponly" in attributes and attributes["samesite"].lower() == "strict"
    assert attributes["path"] == "/console"


def test_the_cookie_is_secure_when_the_api_serves_tls_itself(
    api_factory: Callable[..., Api],
    certificate: tuple[Path, Path],  # noqa: F811
) -> None:
    cert, key = certificate
    api = api_factory(worker=False, api_tls_cert=cert, api_tls_key=key, **TOKENS)
    with httpx.Client(base_url=api.url, verify=ssl.create_default_context(cafile=str(cert))) as https:
        reply = https.post("/console/login", data={"token": HOST_TOKEN})
    assert reply.status_code == 303
    [line] = reply.headers.get_list("set-cookie")
    assert "secure" in [part.strip().lower() for part in line.split(";")]


# -- malformed cookies and CSRF tokens ------------------------------------------------------


def malformed_cookies(api: Api, good: str) -> dict[str, bytes]:
    """Cookie values a session must never be read from, by what is wrong with them.

    Built from the good cookie by edits that know only that it is ASCII, starts with
    the session id and ends with the signature, each up to a dot, so that they stand
    whatever the signing library writes in between."""
    signed, _, signature = good.rpartition(".")
    sid = good.partition(".")[0]
    keys = keys_of(api)
    expired, expired_cookie = keys.new_session(now=time.time() - SESSION_S - 60)
    redis_of(api).set(session_key(expired.sid), b"1", ex=600)  # live in Redis: expiry alone refuses
    logged_out = log_in(api)
    assert log_out(api, logged_out).status == 303
    later = keys.new_session(now=time.time() + 3600)[1]  # another session, signed later
    later_time = later.partition(".")[2].rpartition(".")[0]  # what lies between its id and signature
    other = ConsoleKeys(Tokens.from_settings(api.harness.settings.api), secrets.token_bytes(32))

    def changed(at: int) -> bytes:
        """The good cookie with one character at ``at`` changed to another of base64url."""
        return (good[:at] + ("A" if good[at] != "A" else "B") + good[at + 1 :]).encode()

    return {
        "empty": b"",
        "the id alone": sid.encode(),
        "the signature alone": signature.encode(),
        "a non-ASCII byte first (latin-1)": "é".encode("latin-1") + good[1:].encode(),
        "non-ASCII UTF-8 first": "€".encode() + good[1:].encode(),
        "a non-ASCII letter appended": good.encode() + "é".encode(),
        "a non-ASCII digit for the last": good[:-1].encode() + "²".encode(),
        "a fullwidth letter for the last": good[:-1].encode() + "ｆ".encode(),
        "one character short": good[:-1].encode(),
        "one character long": f"{good}A".encode(),
        "a 4 KB value": good.encode() * 40,
        "not base64url": f"+/{good[2:]}".encode(),
        "base64 padding": f"{good}=".encode(),
        "upper-cased": good.upper().encode(),
        "the first character changed (the id)": changed(0),
        "a character before the signature changed (the issue time)": changed(len(signed) - 1),
        "the last character changed (the signature)": changed(len(good) - 1),
        "a forged signature": f"{signed}.{'A' * len(signature)}".encode(),
        "another session's signature": f"{signed}.{later.rpartition('.')[2]}".encode(),
        "the issue time moved on (another session's)": f"{sid}.{later_time}.{signature}".encode(),
        "signed under another key": other.new_session()[1].encode(),
        "expired": expired_cookie.encode(),
        "logged out": logged_out.encode(),
    }


def test_every_malformed_session_cookie_is_refused_with_403(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, **TOKENS)
    good = log_in(api)
    csrf = csrf_of(api, good)  # this session's: only the cookie is wrong
    answers = {}
    for what, cookie in malformed_cookies(api, good).items():
        action = send(api, "POST", "/console/dead-letters/purge", cookie=cookie, body=f"csrf={csrf}".encode())
        page = send(api, "GET", "/console/dead-letters", cookie=cookie)
        answers[what] = (action.status, page.status, page.location)
    assert answers == {what: (403, 303, "/console/login") for what in answers}
    done = send(api, "POST", "/console/dead-letters/purge", cookie=good.encode(), body=f"csrf={csrf}".encode())
    assert done.status == 303 and "purged" in done.location  # the good cookie still works


def test_every_malformed_csrf_token_is_refused_with_403(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, **TOKENS)
    cookie, other = log_in(api), log_in(api)
    csrf = csrf_of(api, cookie)
    table = {
        "missing": b"back=dead",
        "empty": b"csrf=",
        "non-ASCII UTF-8": f"csrf=é{csrf[1:]}".encode(),
        "non-ASCII percent-encoded": f"csrf=%C3%A9{csrf[1:]}".encode(),
        "not UTF-8 at all": b"csrf=\xe9" + csrf[1:].encode(),
        "a fullwidth letter for the last": f"csrf={csrf[:-1]}".encode() + "ｆ".encode(),
        "a non-ASCII letter appended": f"csrf={csrf}é".encode(),
        "one short": f"csrf={csrf[:-1]}".encode(),
        "one long": f"csrf={csrf}0".encode(),
        "upper-case": f"csrf={csrf.upper()}".encode(),
        "not base64url": f"csrf={'+' * len(csrf)}".encode(),
        "a forged token": f"csrf={'A' * len(csrf)}".encode(),
        "the session cookie's signature": f"csrf={cookie.rpartition('.')[2]}".encode(),
        "a NUL inside": f"csrf=%00{csrf[1:]}".encode(),
        "another session's": f"csrf={csrf_of(api, other)}".encode(),
    }
    answers = {
        what: send(api, "POST", "/console/dead-letters/purge", cookie=cookie.encode(), body=body)
        for what, body in table.items()
    }
    assert {w: r.status for w, r in answers.items()} == {w: 403 for w in table}
    assert all("CSRF" in r.text for r in answers.values())
    done = send(api, "POST", "/console/dead-letters/purge", cookie=cookie.encode(), body=f"csrf={csrf}".encode())
    assert done.status == 303 and "purged" in done.location


# -- Redis down -----------------------------------------------------------------------------


@pytest.fixture
def api_on_own_redis(
    api_factory: Callable[..., Api], make_settings: Callable[..., Settings], own_redis: EmbeddedRedis
) -> Api:
    """The API alone (no worker) on the test's own Redis (``own_redis``, to stop),
    its backend calls bounded to 2 s."""
    return api_factory(
        worker=False,
        settings=make_settings(redis_url=own_redis.url, api_port=0, api_backend_timeout_ms=2_000, **TOKENS),
    )


def test_with_redis_down_the_console_refuses_with_a_page_saying_so(
    api_on_own_redis: Api, own_redis: EmbeddedRedis
) -> None:
    api = api_on_own_redis
    cookie = log_in(api)
    csrf = csrf_of(api, cookie)
    own_redis.stop()

    for refused in (
        send(api, "GET", "/console", cookie=cookie.encode()),
        send(api, "POST", "/console/dead-letters/purge", cookie=cookie.encode(), body=f"csrf={csrf}".encode()),
        send(api, "POST", "/console/login", body=f"token={HOST_TOKEN}".encode()),
    ):
        assert refused.status == 503 and refused.headers["retry-after"] == "5"
        assert "text/html" in refused.headers["content-type"]
        assert "Redis is not answering" in refused.text and "Nothing was done" in refused.text
        assert refused.headers.get_all("set-cookie") is None  # no session handed out
    out = send(api, "POST", "/console/logout", cookie=cookie.encode(), body=f"csrf={csrf}".encode())
    assert out.status == 503 and "logout was not recorded" in out.text
    assert out.headers.get_all("set-cookie") is None  # the cookie kept: log out again later
    signed, _, signature = cookie.rpartition(".")
    forged = send(api, "GET", "/console", cookie=f"{signed}.{'A' * len(signature)}".encode())
    assert forged.status == 303 and forged.location == "/console/login"  # refused without Redis
