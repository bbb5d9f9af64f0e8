"""Which key each model endpoint is sent: the DashScope key-routing policy.

Beside the model client (:mod:`memjobs_worker.model_client`), which sends the
keys this module chooses. The rule: an endpoint gets its own key; else the
other endpoint's own key when both name the same service; else
``DASHSCOPE_API_KEY`` when it is DashScope's own endpoint; else none. A key
never goes to an endpoint it was not given for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import SecretStr

if TYPE_CHECKING:
    from memjobs_worker.settings import EmbeddingSettings, ModelSettings

DASHSCOPE_COMPATIBLE_URL = "https://dashscope.aliyuncs.com/compatible-mode/v1"

#: DashScope's OpenAI-compatible endpoints (mainland and international): the
#: only ones ``DASHSCOPE_API_KEY`` is sent to.
DASHSCOPE_HOSTS = frozenset({"dashscope.aliyuncs.com", "dashscope-intl.aliyuncs.com"})


def is_dashscope(url: str) -> bool:
    """``url`` is DashScope's own endpoint (HTTPS, DashScope's host, default port)."""
    parts = urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:
        return False
    return (
        parts.scheme.lower() == "https"
        and (parts.hostname or "") in DASHSCOPE_HOSTS
        and port in (None, 443)
        and not parts.username
        and not parts.password
    )


def same_endpoint(a: str, b: str) -> bool:
    """Two base URLs name the same service (scheme, host, port and path; a
    trailing slash aside)."""

    def norm(url: str) -> tuple[str, str, int | None, str]:
        parts = urlsplit(url.strip())
        try:
            port = parts.port
        except ValueError:
            port = -1
        return (parts.scheme.lower(), (parts.hostname or "").lower(), port, parts.path.rstrip("/"))

    return norm(a) == norm(b)


def key_for(
    url: str,
    *,
    own: SecretStr | None,
    other_url: str | None,
    other: SecretStr | None,
    dashscope: SecretStr | None,
) -> SecretStr | None:
    """Which key the endpoint ``url`` gets (the module's rule)."""
    if own is not None:
        return own
    if other is not None and other_url is not None and same_endpoint(url, other_url):
        return other
    return dashscope if is_dashscope(url) else None


@dataclass(frozen=True)
class ModelKeys:
    """The key each endpoint is sent, and the variable each came from (for ``memjobs config``)."""

    chat: SecretStr | None
    embedding: SecretStr | None
    chat_from: str | None
    embedding_from: str | None


def route_keys(model: ModelSettings, embedding: EmbeddingSettings) -> ModelKeys:
    """The keys of the light text model's endpoint and of the embedding endpoint."""
    chat = key_for(
        model.base_url,
        own=model.api_key,
        other_url=embedding.base_url,
        other=embedding.api_key,
        dashscope=model.dashscope_api_key,
    )
    embed = None
    if embedding.base_url is not None:
        embed = key_for(
            embedding.base_url,
            own=embedding.api_key,
            other_url=model.base_url,
            other=model.api_key,
            dashscope=model.dashscope_api_key,
        )
    named = (
        (model.api_key, "QWEN_AUDIO_MEMORY_API_KEY"),
        (embedding.api_key, "MEMJOBS_EMBEDDING_API_KEY"),
        (model.dashscope_api_key, "DASHSCOPE_API_KEY"),
    )

    def source(key: SecretStr | None) -> str | None:
        return next((env for value, env in named if key is not None and key is value), None)

    return ModelKeys(chat, embed, source(chat), source(embed))


def model_configured(model: ModelSettings, embedding: EmbeddingSettings) -> bool:
    """A model is configured when its endpoint has a key, or a custom endpoint
    was named (a local Ollama needs no key). DashScope without a key is none."""
    return route_keys(model, embedding).chat is not None or not is_dashscope(model.base_url)
