"""Which key goes to which model endpoint (issue 22).

A blank value is no value (``DASHSCOPE_API_KEY=`` as ``.env.example`` ships it
means no model); ``DASHSCOPE_API_KEY`` goes to DashScope's endpoint alone; a
custom endpoint gets its own key (or the other endpoint's own key when both are
the same service) or none, with no ``Authorization`` header at all. The model
stand-in records the header of every request it gets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memjobs_worker.model_client import chat_model, remote_embedder
from memjobs_worker.model_keys import DASHSCOPE_COMPATIBLE_URL, is_dashscope
from memjobs_worker.settings import Settings, load_settings
from tests.support.openai_server import FakeOpenAI

DASH = "sk-dash-0123456789"
MINE = "sk-mine-0123456789"
EMB = "sk-emb-0123456789"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    monkeypatch.setenv("MEMJOBS_DATA_DIR", str(tmp_path))
    # The OpenAI SDK's own variable must not be picked up either.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-env-0123456789")
    return monkeypatch


def _chat_auth(settings: Settings, server: FakeOpenAI) -> str | None:
    model = chat_model(settings.model, settings.embedding, "extract")
    assert model is not None
    try:
        model.generate_response([{"role": "user", "content": "hello"}])
    finally:
        model.close()
    return server.requests_for("chat")[-1].headers.get("authorization")


def _embed_auth(settings: Settings, server: FakeOpenAI) -> str | None:
    embedder = remote_embedder(settings.model, settings.embedding)
    assert embedder is not None
    try:
        embedder.embed("hello")
    finally:
        embedder.close()
    return server.requests_for("embeddings")[-1].headers.get("authorization")


@pytest.mark.parametrize(
    "name",
    [
        "DASHSCOPE_API_KEY",
        "QWEN_AUDIO_MEMORY_API_KEY",
        "MEMJOBS_EMBEDDING_API_KEY",
        "MEMJOBS_EMBEDDING_BASE_URL",
        "QWEN_AUDIO_MEMORY_BASE_URL",
        "MEMJOBS_API_GATEWAY_TOKEN",
        "MEMJOBS_API_HOST_TOKEN",
        "MEMJOBS_REDIS_URL",
        "MEMJOBS_DATABASE_URL",
        "MEMJOBS_REDIS_SENTINELS",
        "MEMJOBS_API_TLS_CERT",
    ],
)
@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_key_or_url_is_none(env: pytest.MonkeyPatch, name: str, blank: str) -> None:
    env.setenv(name, blank)
    settings = load_settings()
    assert not settings.model_configured and not settings.consolidation_enabled
    assert settings.model_keys.chat is None and settings.model_keys.embedding is None
    assert not settings.embedding.configured
    for key in (
        "model.dashscope_api_key",
        "model.api_key",
        "embedding.api_key",
        "api.gateway_token",
        "api.host_token",
        "redis.url",
        "database.url",
        "redis.sentinels",
        "api.tls_cert",
    ):
        assert settings.entry(key).value is None, key
    assert settings.model.base_url == DASHSCOPE_COMPATIBLE_URL
    assert chat_model(settings.model, settings.embedding, "consolidate") is None


def test_a_blank_data_dir_is_the_default_not_the_current_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("MEMJOBS_DATA_DIR", " ")
    assert load_settings().data_dir == (tmp_path / ".memjobs").resolve()


def test_a_blank_dashscope_key_as_env_example_ships_it_is_no_model(env: pytest.MonkeyPatch) -> None:
    env.setenv("DASHSCOPE_API_KEY", "")
    env.setenv("QWEN_AUDIO_MEMORY_AUTO", "on")
    env.setenv("QWEN_AUDIO_SESSION_DIGEST", "on")
    settings = load_settings()
    assert not settings.consolidation_enabled and not settings.digest_enabled
    assert settings.redacted()["model_configured"] is False


def test_the_dashscope_key_goes_to_dashscope(env: pytest.MonkeyPatch) -> None:
    env.setenv("DASHSCOPE_API_KEY", DASH)
    settings = load_settings()
    assert settings.model_configured and settings.consolidation_enabled
    assert settings.model_keys.chat is not None and settings.model_keys.chat.get_secret_value() == DASH
    model = chat_model(settings.model, settings.embedding, "consolidate")
    assert model is not None  # DashScope is not called from a test: the client it would use
    assert model.client.api_key == DASH and model.headers == {}
    assert str(model.client.base_url).startswith(DASHSCOPE_COMPATIBLE_URL)
    model.close()
    # Its own key wins at DashScope too.
    env.setenv("QWEN_AUDIO_MEMORY_API_KEY", MINE)
    assert load_settings().model_keys.chat.get_secret_value() == MINE  # type: ignore[union-attr]


def test_a_custom_endpoint_never_gets_the_dashscope_key(env: pytest.MonkeyPatch, fake_model: FakeOpenAI) -> None:
    env.setenv("DASHSCOPE_API_KEY", DASH)
    env.setenv("QWEN_AUDIO_MEMORY_BASE_URL", fake_model.base_url)
    settings = load_settings()
    assert settings.model_configured  # a named endpoint needs no key (a local Ollama)
    assert settings.model_keys.chat is None
    assert _chat_auth(settings, fake_model) is None  # no header at all, not even a placeholder
    assert DASH not in str([r.headers for r in fake_model.requests_for("chat")])
    shown = settings.redacted()  # `memjobs config` says which setting's key goes where
    assert shown["memory_key_from"] is None and DASH not in json.dumps(shown)
    env.setenv("QWEN_AUDIO_MEMORY_BASE_URL", "")
    assert load_settings().redacted()["memory_key_from"] == "DASHSCOPE_API_KEY"


def test_a_custom_endpoint_gets_its_own_key(env: pytest.MonkeyPatch, fake_model: FakeOpenAI) -> None:
    env.setenv("DASHSCOPE_API_KEY", DASH)
    env.setenv("QWEN_AUDIO_MEMORY_BASE_URL", fake_model.base_url)
    env.setenv("QWEN_AUDIO_MEMORY_API_KEY", MINE)
    assert _chat_auth(load_settings(), fake_model) == f"Bearer {MINE}"


def test_a_custom_endpoint_without_any_key_gets_no_header(env: pytest.MonkeyPatch, fake_model: FakeOpenAI) -> None:
    env.setenv("QWEN_AUDIO_MEMORY_BASE_URL", fake_model.base_url)
    assert _chat_auth(load_settings(), fake_model) is None


def test_embeddings_follow_the_same_rule(env: pytest.MonkeyPatch, fake_model: FakeOpenAI) -> None:
    env.setenv("DASHSCOPE_API_KEY", DASH)
    env.setenv("QWEN_AUDIO_MEMORY_API_KEY", MINE)  # the light model's key (DashScope's endpoint)
    env.setenv("MEMJOBS_EMBEDDING_BASE_URL", fake_model.base_url)
    assert _embed_auth(load_settings(), fake_model) is None  # neither DashScope's nor another's key
    env.setenv("MEMJOBS_EMBEDDING_API_KEY", EMB)
    assert _embed_auth(load_settings(), fake_model) == f"Bearer {EMB}"


def test_embeddings_at_dashscope_get_the_dashscope_key(env: pytest.MonkeyPatch) -> None:
    env.setenv("DASHSCOPE_API_KEY", DASH)
    env.setenv("MEMJOBS_EMBEDDING_BASE_URL", DASHSCOPE_COMPATIBLE_URL + "/")
    settings = load_settings()
    assert settings.model_keys.embedding.get_secret_value() == DASH  # type: ignore[union-attr]
    embedder = remote_embedder(settings.model, settings.embedding)
    assert embedder is not None and embedder.client.api_key == DASH
    embedder.close()


def test_one_endpoint_for_both_shares_its_own_key(env: pytest.MonkeyPatch, fake_model: FakeOpenAI) -> None:
    env.setenv("DASHSCOPE_API_KEY", DASH)
    env.setenv("QWEN_AUDIO_MEMORY_BASE_URL", fake_model.base_url)
    env.setenv("MEMJOBS_EMBEDDING_BASE_URL", fake_model.base_url + "/")
    env.setenv("MEMJOBS_EMBEDDING_API_KEY", EMB)
    settings = load_settings()
    assert _chat_auth(settings, fake_model) == f"Bearer {EMB}"  # the embedding key where it applies
    assert _embed_auth(settings, fake_model) == f"Bearer {EMB}"
    env.delenv("MEMJOBS_EMBEDDING_API_KEY")
    env.setenv("QWEN_AUDIO_MEMORY_API_KEY", MINE)
    settings = load_settings()
    assert _embed_auth(settings, fake_model) == f"Bearer {MINE}"


def test_another_endpoint_does_not_get_the_light_models_key(env: pytest.MonkeyPatch, fake_model: FakeOpenAI) -> None:
    with FakeOpenAI(embedding_dims=64) as other:
        env.setenv("QWEN_AUDIO_MEMORY_BASE_URL", other.base_url)
        env.setenv("QWEN_AUDIO_MEMORY_API_KEY", MINE)
        env.setenv("MEMJOBS_EMBEDDING_BASE_URL", fake_model.base_url)
        settings = load_settings()
        assert _embed_auth(settings, fake_model) is None
        assert _chat_auth(settings, other) == f"Bearer {MINE}"


@pytest.mark.parametrize(
    "url",
    [
        "https://dashscope.aliyuncs.com.proxy.example/compatible-mode/v1",
        "http://dashscope.aliyuncs.com/compatible-mode/v1",
        "https://dashscope.aliyuncs.com:8443/compatible-mode/v1",
        "https://me@dashscope.aliyuncs.com/compatible-mode/v1",
        "https://proxy.example/dashscope.aliyuncs.com/v1",
        "http://127.0.0.1:11434/v1",
    ],
)
def test_only_dashscope_itself_is_dashscope(env: pytest.MonkeyPatch, url: str) -> None:
    assert not is_dashscope(url)
    env.setenv("DASHSCOPE_API_KEY", DASH)
    env.setenv("QWEN_AUDIO_MEMORY_BASE_URL", url)
    assert load_settings().model_keys.chat is None


def test_dashscope_hosts_are_dashscope() -> None:
    assert is_dashscope(DASHSCOPE_COMPATIBLE_URL)
    assert is_dashscope("https://DashScope-intl.aliyuncs.com/compatible-mode/v1")
