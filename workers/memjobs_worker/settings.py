"""Settings: read once at an entry point (CLI, worker process), then passed down.

Project settings carry the ``MEMJOBS_`` prefix; the names inherited from the
voice assistant keep their own (``NOVA_AUDIO_AGENT_MEMORY_PROVIDER``,
``QWEN_AUDIO_MEMORY_*``, ``DASHSCOPE_API_KEY``). Durations carry their unit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from memjobs_client.contracts import (
    DEFAULT_MAX_KNOWLEDGE_DOC_CHARS,
    DEFAULT_MAX_TEXT_BYTES,
    DEFAULT_MAX_TRANSCRIPT_BYTES,
)
from memjobs_client.errors import ConfigurationError

DASHSCOPE_COMPATIBLE_URL = "https://dashscope.aliyuncs.com/compatible-mode/v1"


class Settings(BaseSettings):
    """Every knob memjobs has; see the README's configuration table."""

    model_config = SettingsConfigDict(env_prefix="MEMJOBS_", extra="ignore", populate_by_name=True)

    # Infrastructure. Unset URLs mean "the embedded stack in data_dir".
    redis_url: str | None = None
    database_url: str | None = None
    data_dir: Path = Field(default_factory=lambda: Path.home() / ".memjobs")

    # Personal memory engine: mem0, or off.
    memory_provider: Literal["mem0", "off"] = Field(
        default="mem0", validation_alias=AliasChoices("NOVA_AUDIO_AGENT_MEMORY_PROVIDER")
    )

    # The light text model (fact extraction; consolidation later).
    memory_base_url: str = Field(
        default=DASHSCOPE_COMPATIBLE_URL, validation_alias=AliasChoices("QWEN_AUDIO_MEMORY_BASE_URL")
    )
    memory_model: str = Field(
        default="qwen-flash", validation_alias=AliasChoices("QWEN_AUDIO_MEMORY_MODEL")
    )
    memory_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("QWEN_AUDIO_MEMORY_API_KEY", "DASHSCOPE_API_KEY"),
    )
    model_timeout_ms: int = Field(default=30_000, gt=0)
    model_max_attempts: int = Field(default=3, ge=1)

    # Session end: automatic consolidation into USER.md / MEMORY.md, digests.
    memory_auto: Literal["on", "off"] = Field(
        default="on", validation_alias=AliasChoices("QWEN_AUDIO_MEMORY_AUTO")
    )
    session_digest: Literal["on", "off"] = Field(
        default="off", validation_alias=AliasChoices("QWEN_AUDIO_SESSION_DIGEST")
    )
    #: "markdown" (files in the data directory), "sql" (the state database, for
    #: multi-host), or a host's own provider as "package.module:factory".
    memory_docs_provider: str = "markdown"
    max_transcript_bytes: int = Field(default=DEFAULT_MAX_TRANSCRIPT_BYTES, gt=0)
    max_patches_per_session: int = Field(default=10, ge=1, le=100)
    max_patch_chars: int = Field(default=1000, ge=10)
    max_document_chars: int = Field(default=8000, ge=100)
    digest_retention_days: int = Field(default=90, ge=1)
    task_retention_days: int = Field(default=3, ge=1)

    # Knowledge (the user's own documents): off creates no table and no worker use.
    knowledge: Literal["on", "off"] = "on"
    knowledge_chunk_chars: int = Field(default=500, ge=50, le=8000)
    knowledge_chunk_overlap_chars: int = Field(default=80, ge=0)
    knowledge_max_doc_chars: int = Field(default=DEFAULT_MAX_KNOWLEDGE_DOC_CHARS, ge=100)
    knowledge_max_file_bytes: int = Field(default=2_000_000, ge=100)
    knowledge_max_corpus_chars: int = Field(default=5_000_000, ge=1000)
    knowledge_embed_batch: int = Field(default=32, ge=1, le=2048)

    # Embeddings: an OpenAI-compatible endpoint, or the offline embedder.
    embedding_base_url: str | None = None
    embedding_model: str = "text-embedding-v4"
    embedding_api_key: SecretStr | None = None
    embedding_dims: int = Field(default=1024, gt=0, le=16_000)
    offline_embedding_dims: int = Field(default=512, gt=0, le=4096)

    # Ledger and extraction.
    max_text_bytes: int = Field(default=DEFAULT_MAX_TEXT_BYTES, gt=0)
    extract_batch_size: int = Field(default=10, ge=1, le=100)
    extract_delay_ms: int = Field(default=500, ge=0)
    lease_ms: int = Field(default=30_000, ge=300)
    recall_min_score: float = Field(default=0.1, ge=0.0, le=1.0)
    sweep_pending_after_ms: int = Field(default=60_000, ge=0)
    sweep_interval_ms: int = Field(default=15_000, ge=100)

    # Dramatiq.
    max_retries: int = Field(default=10, ge=0)
    min_backoff_ms: int = Field(default=1_000, ge=1)
    max_backoff_ms: int = Field(default=300_000, ge=1)
    broker_heartbeat_timeout_ms: int = Field(default=60_000, ge=1_000)
    worker_processes: int = Field(default=1, ge=1)
    worker_threads: int = Field(default=4, ge=1)

    # Operations: Prometheus endpoint, worker heartbeats.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=9191, ge=0, le=65535)
    heartbeat_interval_ms: int = Field(default=5_000, ge=100)
    heartbeat_ttl_ms: int = Field(default=15_000, ge=300)

    # The HTTP API (`memjobs api`, started by `memjobs up`): see the README's HTTP section.
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8780, ge=0, le=65535)
    api_gateway_token: SecretStr | None = None
    api_host_token: SecretStr | None = None
    api_tls_cert: Path | None = None
    api_tls_key: Path | None = None
    api_max_body_bytes: int = Field(default=1_048_576, ge=1024)
    api_max_in_flight: int = Field(default=64, ge=1)
    api_backend_timeout_ms: int = Field(default=10_000, ge=100)
    api_max_listing: int = Field(default=200, ge=1, le=10_000)

    log_level: str = "INFO"

    @property
    def metrics_dir(self) -> Path:
        """Prometheus multiprocess files of the worker processes on this host."""
        return self.data_dir / "run" / "prometheus"

    @field_validator("data_dir", mode="after")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @property
    def memory_enabled(self) -> bool:
        return self.memory_provider != "off"

    @property
    def model_configured(self) -> bool:
        """A model is configured when a key is set or the endpoint was named (a
        local Ollama needs no key)."""
        return self.memory_api_key is not None or "memory_base_url" in self.model_fields_set

    @property
    def consolidation_enabled(self) -> bool:
        """Automatic consolidation: on unless QWEN_AUDIO_MEMORY_AUTO=off, and only
        with a model configured (no key: off; explicit memory is unaffected)."""
        return self.memory_auto == "on" and self.model_configured

    @property
    def knowledge_enabled(self) -> bool:
        return self.knowledge == "on"

    @property
    def digest_enabled(self) -> bool:
        return self.session_digest == "on" and self.model_configured

    @property
    def embedding_configured(self) -> bool:
        return self.embedding_base_url is not None

    @property
    def vector_dims(self) -> int:
        return self.embedding_dims if self.embedding_configured else self.offline_embedding_dims

    def redacted(self) -> dict[str, Any]:
        """The effective settings as JSON-ready values, secrets replaced."""
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                value = "[REDACTED]"
            elif name.endswith("_url") and isinstance(value, str):
                value = redact_url(value)
            elif isinstance(value, Path):
                value = str(value)
            out[name] = value
        out["model_configured"] = self.model_configured
        out["consolidation_enabled"] = self.consolidation_enabled
        out["digest_enabled"] = self.digest_enabled
        out["embedding_configured"] = self.embedding_configured
        return out


_SECRET_PARAMS = {"password", "pass", "passwd", "pwd", "sslpassword", "secret", "token", "api_key"}


def redact_url(url: str) -> str:
    """Hide the password of ``scheme://user:password@host`` and of secret query
    parameters (``?password=…``: libpq and redis-py accept both forms)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        creds, _, host = netloc.rpartition("@")
        if ":" in creds:
            netloc = f"{creds.split(':', 1)[0]}:[REDACTED]@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(k, "[REDACTED]" if k.lower() in _SECRET_PARAMS else v) for k, v in pairs], safe="[]"
        )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def load_settings(**overrides: Any) -> Settings:
    """Read the settings from the environment, turning mistakes into one clear error.

    Raises:
        ConfigurationError: a value is invalid, e.g. an unknown memory provider.
    """
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_input=False):
            field = ".".join(str(p) for p in err["loc"])
            env = _ENV_NAMES.get(field, f"MEMJOBS_{field.upper()}")
            problems.append(f"{env}: {err['msg']}")
        raise ConfigurationError("invalid settings: " + "; ".join(problems)) from None


_ENV_NAMES = {
    "memory_provider": "NOVA_AUDIO_AGENT_MEMORY_PROVIDER",
    "NOVA_AUDIO_AGENT_MEMORY_PROVIDER": "NOVA_AUDIO_AGENT_MEMORY_PROVIDER",
    "memory_base_url": "QWEN_AUDIO_MEMORY_BASE_URL",
    "memory_model": "QWEN_AUDIO_MEMORY_MODEL",
    "memory_auto": "QWEN_AUDIO_MEMORY_AUTO",
    "QWEN_AUDIO_MEMORY_AUTO": "QWEN_AUDIO_MEMORY_AUTO",
    "session_digest": "QWEN_AUDIO_SESSION_DIGEST",
    "QWEN_AUDIO_SESSION_DIGEST": "QWEN_AUDIO_SESSION_DIGEST",
}
