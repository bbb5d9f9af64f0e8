"""Who may call the HTTP API and how much: tokens, the bind rule, TLS, the body
cap, the in-flight bound and the backend timeout, each over real HTTP."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memjobs_client.errors import ConfigurationError
from memjobs_worker.cli.main import main as cli_main
from memjobs_worker.endpoints import Endpoints
from memjobs_worker.http.auth import check_bind
from memjobs_worker.http.serve import ApiServer
from memjobs_worker.settings import Settings
from tests.support.http import GATEWAY_TOKEN, HOST_TOKEN, Api, problem, self_signed_certificate
from tests.support.settings import build as build_settings

SIGNING_KEY = "signing-key-0123456789abcdef-0123456789"

REMEMBER = {"owner_id": "alice", "text": "I like green tea"}
REINDEX = {
    "owner_id": "alice",
    "consent": True,
    "documents": [{"doc_id": "d1", "title": "Tea", "text": "Oolong is half oxidised."}],
}


@pytest.fixture
def secured(api_factory: Callable[..., Api]) -> Api:
    return api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN)


# -- tokens ------------------------------------------------------------------------------


def test_loopback_without_tokens_is_open(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False)
    assert api.post("/v1/remember", REMEMBER).status_code == 202
    assert api.post("/v1/knowledge/reindex", REINDEX).status_code == 202


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer wrong-token-0123456789",
        f"Basic {GATEWAY_TOKEN}",
        "Bearer",
        f"bearer {GATEWAY_TOKEN}x",
        "Bearer \u00e9t\u00e9",
    ],
)
def test_missing_or_wrong_token_is_unauthorized(secured: Api, header: str | None) -> None:
    headers: dict[bytes, bytes] = {b"Authorization": header.encode("utf-8")} if header else {}
    for r in (
        secured.http.post("/v1/remember", json=REMEMBER, headers=headers),
        secured.http.get("/v1/sources", headers={**headers, b"X-Memjobs-Owner": b"alice"}),
        secured.http.post("/v1/knowledge/reindex", json=REINDEX, headers=headers),
    ):
        problem(r, "unauthorized", 401)
        assert r.headers["www-authenticate"] == "Bearer"
    assert secured.harness.queues()["memjobs_remember"]["ready"] == 0


def test_gateway_token_opens_gateway_routes_but_not_reindex(secured: Api) -> None:
    assert secured.post("/v1/remember", REMEMBER, token=GATEWAY_TOKEN).status_code == 202
    assert secured.get("/v1/sources", owner="alice", token=GATEWAY_TOKEN).status_code == 200
    body = problem(secured.post("/v1/knowledge/reindex", REINDEX, token=GATEWAY_TOKEN), "forbidden", 403)
    assert "host token" in body["detail"]
    assert secured.harness.queues()["memjobs_knowledge"]["ready"] == 0


def test_host_token_opens_reindex_and_the_gateway_routes(secured: Api) -> None:
    assert secured.post("/v1/knowledge/reindex", REINDEX, token=HOST_TOKEN).status_code == 202
    assert secured.post("/v1/remember", REMEMBER, token=HOST_TOKEN).status_code == 202


def test_health_and_metrics_need_no_token(secured: Api) -> None:
    assert secured.get("/healthz").status_code == 200
    assert secured.get("/readyz").status_code == 200
    assert secured.get("/metrics").status_code == 200
    assert secured.get("/openapi.json").status_code == 200


def test_only_a_gateway_token_set_leaves_reindex_closed(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, api_gateway_token=GATEWAY_TOKEN)
    problem(api.post("/v1/knowledge/reindex", REINDEX, token=GATEWAY_TOKEN), "forbidden", 403)
    problem(api.post("/v1/knowledge/reindex", REINDEX), "unauthorized", 401)


# -- the bind rule and TLS ------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.internal"])
def test_non_loopback_bind_without_tokens_refuses_to_start(host: str) -> None:
    # Raw values, as from the environment (strings for secrets and paths): pydantic
    # validates them, which its synthesised __init__ signature does not say.
    proxied: dict[str, Any] = {"api_tls_terminated_by_proxy": True}
    with pytest.raises(ConfigurationError, match="MEMJOBS_API_GATEWAY_TOKEN"):
        check_bind(build_settings(api_host=host, **proxied).api)
    with pytest.raises(ConfigurationError, match="MEMJOBS_API_HOST_TOKEN"):
        check_bind(build_settings(api_host=host, api_gateway_token=GATEWAY_TOKEN, **proxied).api)
    check_bind(
        build_settings(
            api_host=host,
            api_gateway_token=GATEWAY_TOKEN,
            api_host_token=HOST_TOKEN,
            **proxied,
        ).api
    )
    check_bind(build_settings(api_host=host, api_token_key=SIGNING_KEY, **proxied).api)  # scoped tokens only


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.internal"])
def test_non_loopback_plain_http_refuses_to_start_even_with_tokens(host: str) -> None:
    tokens: dict[str, Any] = {"api_gateway_token": GATEWAY_TOKEN, "api_host_token": HOST_TOKEN}
    with pytest.raises(ConfigurationError, match="MEMJOBS_API_TLS_CERT.*MEMJOBS_API_TLS_TERMINATED_BY_PROXY"):
        check_bind(build_settings(api_host=host, **tokens).api)
    check_bind(build_settings(api_host=host, api_tls_cert="/c.pem", api_tls_key="/k.pem", **tokens).api)
    check_bind(build_settings(api_host=host, api_tls_terminated_by_proxy=True, **tokens).api)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "localhost"])
def test_loopback_bind_may_run_without_tokens(host: str) -> None:
    check_bind(build_settings(api_host=host).api)


def test_memjobs_api_refuses_a_public_bind_without_tokens_before_listening(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    redis_url: str,
    database_url: str,
) -> None:
    for name, value in (
        ("MEMJOBS_DATA_DIR", str(tmp_path)),
        ("MEMJOBS_REDIS_URL", redis_url),
        ("MEMJOBS_DATABASE_URL", database_url),
    ):
        monkeypatch.setenv(name, value)
    assert cli_main(["api", "--host", "0.0.0.0", "--port", "0"]) == 3
    assert "MEMJOBS_API_GATEWAY_TOKEN" in capsys.readouterr().err
    # With both tokens, plain HTTP off loopback is still refused.
    monkeypatch.setenv("MEMJOBS_API_GATEWAY_TOKEN", GATEWAY_TOKEN)
    monkeypatch.setenv("MEMJOBS_API_HOST_TOKEN", HOST_TOKEN)
    assert cli_main(["api", "--host", "0.0.0.0", "--port", "0"]) == 3
    assert "MEMJOBS_API_TLS_TERMINATED_BY_PROXY" in capsys.readouterr().err
    # A token of spaces, even on loopback, is a mistake, not "no token": the door stays shut.
    monkeypatch.setenv("MEMJOBS_API_GATEWAY_TOKEN", " " * 16)
    assert cli_main(["api", "--port", "0"]) == 3
    assert "MEMJOBS_API_GATEWAY_TOKEN must not be blank" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"api_gateway_token": "short"}, "at least 16"),
        ({"api_gateway_token": " " * 16}, "blank"),
        ({"api_host_token": f" {HOST_TOKEN} "}, "blank"),
        ({"api_token_key": " " * 40}, "blank"),
        ({"api_token_key": "k" * 31}, "at least 32"),
        ({"api_token_previous_key": SIGNING_KEY}, "without MEMJOBS_API_TOKEN_KEY"),
        ({"api_token_key": SIGNING_KEY, "api_token_previous_key": SIGNING_KEY}, "must differ"),
        ({"api_gateway_token": GATEWAY_TOKEN, "api_host_token": GATEWAY_TOKEN}, "must differ"),
        ({"api_tls_cert": "/tmp/cert.pem"}, "MEMJOBS_API_TLS_KEY"),  # noqa: S108 - a setting, never opened
    ],
)
def test_unsafe_token_and_tls_settings_refuse_to_start(overrides: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        check_bind(build_settings(**overrides).api)


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path)


def test_tls_is_served_with_a_certificate_and_key(
    api_factory: Callable[..., Api], certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    api = api_factory(
        worker=False, api_tls_cert=cert, api_tls_key=key, api_gateway_token=GATEWAY_TOKEN, api_host_token=HOST_TOKEN
    )
    assert api.url.startswith("https://127.0.0.1:")
    context = ssl.create_default_context(cafile=str(cert))
    with httpx.Client(base_url=api.url, verify=context) as client:
        r = client.post("/v1/remember", json=REMEMBER, headers={"Authorization": f"Bearer {GATEWAY_TOKEN}"})
        assert r.status_code == 202, r.text
    with pytest.raises(httpx.HTTPError):
        httpx.get(api.url.replace("https", "http") + "/healthz", timeout=5)


def test_tls_is_served_on_a_non_loopback_bind(api_factory: Callable[..., Api], certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    api = api_factory(
        worker=False,
        api_host="0.0.0.0",
        api_tls_cert=cert,
        api_tls_key=key,
        api_gateway_token=GATEWAY_TOKEN,
        api_host_token=HOST_TOKEN,
    )
    assert api.url.startswith("https://0.0.0.0:")
    port = api.url.rsplit(":", 1)[1]
    context = ssl.create_default_context(cafile=str(cert))
    with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=context) as client:
        r = client.get("/v1/sources", headers={"Authorization": f"Bearer {GATEWAY_TOKEN}", "X-Memjobs-Owner": "alice"})
        assert r.status_code == 200, r.text
        assert r.headers["cache-control"] == "no-store"


def test_a_certificate_that_cannot_be_loaded_is_a_configuration_error(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    (tmp_path / "c.pem").write_text("not a certificate")
    settings = make_settings(api_port=0, api_tls_cert=tmp_path / "c.pem", api_tls_key=tmp_path / "c.pem")
    assert settings.redis.url and settings.database.url
    with pytest.raises(ConfigurationError, match="TLS"):
        ApiServer(settings, Endpoints(settings.redis.url, settings.database.url))


# -- body cap, in-flight bound, timeouts ----------------------------------------------------


def test_a_body_over_the_cap_is_413_declared_or_streamed(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, api_max_body_bytes=4096)
    big = {"owner_id": "alice", "text": "x" * 5000}
    problem(api.post("/v1/remember", big), "too_large", 413)

    def chunks() -> Iterator[bytes]:
        yield b'{"owner_id": "alice", "text": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}'

    problem(
        api.http.post("/v1/remember", content=chunks(), headers={"content-type": "application/json"}), "too_large", 413
    )
    assert api.post("/v1/remember", {"owner_id": "alice", "text": "x" * 3000}).status_code == 202
    assert api.harness.queues()["memjobs_remember"]["ready"] == 1


def test_text_over_the_source_limit_is_a_validation_problem(api_factory: Callable[..., Api]) -> None:
    api = api_factory(worker=False, max_text_bytes=100)
    body = problem(api.post("/v1/remember", {"owner_id": "a", "text": "字" * 40}), "validation", 422)
    assert "over the limit of 100 bytes" in body["detail"]


class SilentRedis:
    """A TCP server that accepts connections and never answers: a hung backend."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.accepted = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.sock.getsockname()[1]}/0"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.accepted.set()

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()


@pytest.fixture
def silent_redis() -> Iterator[SilentRedis]:
    server = SilentRedis()
    yield server
    server.close()


def test_a_hung_backend_answers_503_within_the_timeout(
    make_settings: Callable[..., Settings], silent_redis: SilentRedis, database_url: str
) -> None:
    settings = make_settings(api_port=0, api_backend_timeout_ms=300)
    server = ApiServer(settings, Endpoints(silent_redis.url, database_url))
    url = server.start()
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            r = client.post("/v1/remember", json=REMEMBER)
            problem(r, "backend_unavailable", 503)
            assert r.headers["retry-after"] == "1" and "127.0.0.1" not in r.text
            problem(client.get("/readyz"), "backend_unavailable", 503)
            assert client.get("/healthz").status_code == 200
    finally:
        assert server.stop()


def test_requests_over_the_in_flight_bound_get_503_with_retry_after(
    make_settings: Callable[..., Settings], silent_redis: SilentRedis, database_url: str
) -> None:
    settings = make_settings(api_port=0, api_backend_timeout_ms=3000, api_max_in_flight=1)
    server = ApiServer(settings, Endpoints(silent_redis.url, database_url))
    url = server.start()
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            slow: list[httpx.Response] = []
            first = threading.Thread(target=lambda: slow.append(client.post("/v1/remember", json=REMEMBER)))
            first.start()
            assert silent_redis.accepted.wait(10), "the first request never reached the backend"
            r = client.post("/v1/remember", json=REMEMBER)
            problem(r, "overloaded", 503)
            assert r.headers["retry-after"] == "1"
            assert client.get("/healthz").status_code == 200  # liveness is never refused
            # Readiness is outside the bound too: it reaches the (hung) backend, not "overloaded".
            problem(client.get("/readyz"), "backend_unavailable", 503)
            first.join()
            problem(slow[0], "backend_unavailable", 503)
            metrics = client.get("/metrics").text
            # The refusal comes before routing: it is counted without a route.
            assert 'memjobs_api_requests_total{method="POST",route="unmatched",status="503"} 1.0' in metrics
            assert 'memjobs_api_requests_total{method="POST",route="/v1/remember",status="503"} 1.0' in metrics
    finally:
        assert server.stop()
