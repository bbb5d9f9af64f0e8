"""Settings: read once at an entry point (CLI, worker process), then passed down.

Project settings carry the ``MEMJOBS_`` prefix; the names inherited from the
voice assistant keep their own (``NOVA_AUDIO_AGENT_MEMORY_PROVIDER``,
``QWEN_AUDIO_MEMORY_*``, ``DASHSCOPE_API_KEY``). Durations carry their unit.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import AliasChoices, Field, PrivateAttr, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from memjobs_client.contracts import (
    DEFAULT_MAX_KNOWLEDGE_DOC_CHARS,
    DEFAULT_MAX_TEXT_BYTES,
    DEFAULT_MAX_TRANSCRIPT_BYTES,
    SourceRules,
)
from memjobs_client.errors import ConfigurationError

DASHSCOPE_COMPATIBLE_URL = "https://dashscope.aliyuncs.com/compatible-mode/v1"


#: Keys, tokens, URLs and paths: a blank value is none (see ``Settings._blank_is_unset``).
_KEYS_AND_ADDRESSES = (
    "redis_url",
    "database_url",
    "memory_api_key",
    "dashscope_api_key",
    "embedding_base_url",
    "embedding_api_key",
    "redis_sentinels",
    "api_tls_cert",
    "api_tls_key",
)
#: The API's credentials: a blank one is none too, but one given as spaces is also noted
#: (:attr:`Settings.blank_credentials`), for the API to refuse to start: a token meant to
#: be set must not leave the door open.
_API_CREDENTIALS = ("api_gateway_token", "api_host_token", "api_token_key", "api_token_previous_key")


class Settings(BaseSettings):
    """Every knob memjobs has; see docs/configuration.md."""

    model_config = SettingsConfigDict(env_prefix="MEMJOBS_", extra="ignore", populate_by_name=True)
    _blank_credentials: frozenset[str] = PrivateAttr(default=frozenset())

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
    memory_model: str = Field(default="qwen-flash", validation_alias=AliasChoices("QWEN_AUDIO_MEMORY_MODEL"))
    #: The key of the endpoint above, whatever it is; sent to it alone.
    memory_api_key: SecretStr | None = Field(default=None, validation_alias=AliasChoices("QWEN_AUDIO_MEMORY_API_KEY"))
    #: DashScope's key: sent only to DashScope's endpoint (the default base URL),
    #: never to another one (see :meth:`Settings.key_for`).
    dashscope_api_key: SecretStr | None = Field(default=None, validation_alias=AliasChoices("DASHSCOPE_API_KEY"))
    model_timeout_ms: int = Field(default=30_000, gt=0)
    model_max_attempts: int = Field(default=3, ge=1)
    #: The circuit breaker of each model service, shared by every host
    #: (memjobs_worker.model_breaker): this many outage failures (refused,
    #: timed out, 429, 5xx) within model_breaker_window_ms open it; while open,
    #: one probe call per model_breaker_probe_interval_ms (across hosts) is
    #: made, and its success closes it; a window without any failure closes it too.
    model_breaker_failures: int = Field(default=5, ge=1)
    model_breaker_window_ms: int = Field(default=30_000, ge=100)
    model_breaker_probe_interval_ms: int = Field(default=2_000, ge=10)

    # Session end: automatic consolidation into USER.md / MEMORY.md, digests.
    memory_auto: Literal["on", "off"] = Field(default="on", validation_alias=AliasChoices("QWEN_AUDIO_MEMORY_AUTO"))
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
    #: Memory audit rows (the memory_audit table) older than this are deleted by the sweeper.
    memory_audit_retention_days: int = Field(default=90, ge=1)

    # The L0 blackboard of each session (the seeds' three limits, per session), and
    # the seeds' own settings, read by `memjobs blackboard import` for its defaults.
    blackboard_retention_days: int = Field(default=7, ge=1)
    blackboard_max_entries: int = Field(default=1000, ge=1)
    blackboard_max_bytes: int = Field(default=8 * 1024 * 1024, ge=64 * 1024)
    blackboard_path: Path = Field(
        default_factory=lambda: Path.home() / ".nova-audio-agent" / "blackboard.sqlite",
        validation_alias=AliasChoices("NOVA_AUDIO_AGENT_BLACKBOARD_PATH"),
    )
    blackboard_owner_id: str | None = Field(
        default=None, validation_alias=AliasChoices("NOVA_AUDIO_AGENT_BLACKBOARD_OWNER_ID")
    )
    # An owner's erasure (memjobs erase, DELETE /v1/owners): how long the owner's
    # jobs are dropped after it ends, and how long it waits for jobs already running.
    erase_hold_ms: int = Field(default=3_600_000, ge=1000)
    erase_wait_ms: int = Field(default=60_000, ge=0)

    # Knowledge (the user's own documents), opt-in: off creates no table, no
    # worker consumes its queue, no MCP server; personal memory is unaffected.
    knowledge: Literal["on", "off"] = "off"
    knowledge_chunk_chars: int = Field(default=500, ge=50, le=8000)
    knowledge_chunk_overlap_chars: int = Field(default=80, ge=0)
    knowledge_max_doc_chars: int = Field(default=DEFAULT_MAX_KNOWLEDGE_DOC_CHARS, ge=100)
    knowledge_max_file_bytes: int = Field(default=2_000_000, ge=100)
    knowledge_max_corpus_chars: int = Field(default=5_000_000, ge=1000)
    knowledge_embed_batch: int = Field(default=32, ge=1, le=2048)
    #: How long one reindex_knowledge attempt may run before it is stopped (and retried).
    knowledge_reindex_time_limit_ms: int = Field(default=3_600_000, ge=10_000)
    #: The host's allowed roots: files are read only under one of these (and under
    #: the roots a reindex names), separated by the OS path separator (":").
    knowledge_roots: str = "~"

    # Embeddings: an OpenAI-compatible endpoint, or the local embedder (docs/embeddings.md).
    embedding_base_url: str | None = None
    embedding_model: str = "text-embedding-v4"
    embedding_api_key: SecretStr | None = None
    embedding_dims: int = Field(default=1024, gt=0, le=16_000)
    offline_embedding_dims: int = Field(default=512, gt=0, le=4096)
    #: With no embedding service: "e5", the local multilingual model (the default;
    #: docs/embeddings.md), or "hashing", the hashed embedder (a test double and an
    #: explicit fallback: lexical only, and knowledge then ranks by keywords).
    local_embedder: Literal["e5", "hashing"] = "e5"
    #: OpenMP threads of one local-model call (each process holds its own model).
    local_embedder_threads: int = Field(default=1, ge=1, le=64)
    #: Characters of one text embedded at most: the rest is not sent to the service nor
    #: tokenised by the local model (which then reads its 512-token window at most).
    embedding_max_chars: int = Field(default=8192, ge=100, le=1_000_000)
    #: Embeddings one process runs at once; one owner holds at most one of them
    #: (docs/security.md, "Bounded work").
    embedding_slots: int = Field(default=2, ge=1, le=64)
    #: Concurrent short questions embedded in one local-model call (off: measured
    #: no faster on 2 cores, docs/benchmarks.md "Concurrent recall").
    embedding_batch_queries: bool = False

    # Ledger and extraction.
    max_text_bytes: int = Field(default=DEFAULT_MAX_TEXT_BYTES, gt=0)
    extract_batch_size: int = Field(default=10, ge=1, le=100)
    #: Sources per learning batch without a chat model (stored verbatim: one
    #: embedding call and one insert a batch).
    verbatim_batch_size: int = Field(default=50, ge=1, le=1000)
    # Micro-batching: an owner's extraction starts when its pending sources
    # fill a batch, or it has had no new source for extract_delay_ms (the quiet
    # period), or its oldest pending source has waited extract_max_wait_ms.
    extract_delay_ms: int = Field(default=500, ge=0)
    extract_max_wait_ms: int = Field(default=5_000, ge=0)
    lease_ms: int = Field(default=10_000, ge=300)
    recall_min_score: float = Field(default=0.1, ge=0.0, le=1.0)
    sweep_pending_after_ms: int = Field(default=15_000, ge=0)
    sweep_interval_ms: int = Field(default=5_000, ge=100)

    # Dramatiq.
    max_retries: int = Field(default=10, ge=0)
    min_backoff_ms: int = Field(default=1_000, ge=1)
    max_backoff_ms: int = Field(default=300_000, ge=1)
    #: A job failing because Redis or the database is unreachable (or the
    #: database is read-only: a failover) is retried for this long since its
    #: first such failure without counting against max_retries, at most
    #: outage_max_backoff_ms apart; then the ordinary retries take over.
    outage_retry_budget_ms: int = Field(default=1_800_000, ge=0)
    outage_max_backoff_ms: int = Field(default=5_000, ge=10)
    #: An owner's "extraction queued" marker (the debounce flag) lasts this long
    #: unless the extraction starts first (or is retried: set again): a message
    #: lost with Redis's data leaves its owner to the sweeper after this long.
    extract_marker_ttl_ms: int = Field(default=900_000, ge=1_000)
    #: A worker process silent this long is dead and its messages are requeued.
    #: Each process beats every ``heartbeat_interval_ms`` from a thread of its
    #: own, so a long job never silences it (keep it ≥ 3 intervals).
    broker_heartbeat_timeout_ms: int = Field(default=15_000, ge=1_000)
    worker_processes: int = Field(default=1, ge=1)
    worker_threads: int = Field(default=4, ge=1)
    # The cheap jobs' own pool (remember, forget, task status); 0 processes:
    # one pool takes every queue.
    fast_worker_processes: int = Field(default=1, ge=0)
    fast_worker_threads: int = Field(default=4, ge=1)
    # The pools in one process (shared), each in processes of its own (split), or
    # shared on a small host when each pool has one process (auto; pools.py).
    worker_layout: Literal["auto", "shared", "split"] = "auto"

    # Operations: Prometheus endpoint, worker heartbeats.
    metrics: Literal["on", "off"] = "on"
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=9191, ge=0, le=65535)
    # Off for all but one pool of a host: the others' processes write to the same
    # multiprocess directory, and the one endpoint serves them merged.
    metrics_endpoint: bool = True
    #: what a metrics port another process holds means: a warning, or a start-up error.
    metrics_bind_failure: Literal["warn", "fail"] = "warn"
    heartbeat_interval_ms: int = Field(default=5_000, ge=100)
    heartbeat_ttl_ms: int = Field(default=15_000, ge=300)

    # Redis durability and reach (issue 13). The embedded Redis fsyncs its
    # append-only file on every write by default, so an acknowledged job
    # survives kill -9 of Redis; WAITAOF (Redis ≥ 7.2) makes producers wait for
    # the fsync locally and/or on replicas before returning.
    redis_appendfsync: Literal["always", "everysec", "no"] = "always"
    redis_waitaof_local: int = Field(default=0, ge=0, le=1)
    redis_waitaof_replicas: int = Field(default=0, ge=0)
    #: Bound on one Redis call (connect, read) for producers, workers and locks:
    #: a call during an outage fails with BackendUnavailable within about this.
    redis_timeout_ms: int = Field(default=5_000, ge=100)
    #: Redis Sentinel: "host:port,host:port"; when set, the master is found
    #: through the sentinels under ``redis_sentinel_master`` (the URL's db and
    #: password still apply).
    redis_sentinels: str | None = None
    redis_sentinel_master: str = "memjobs"
    #: Producers refuse new jobs (RedisFull; HTTP 503 redis_full) while Redis uses
    #: this share of its maxmemory, leaving the rest to the workers draining it;
    #: 1: only Redis's own refusal at maxmemory. Without maxmemory: no effect.
    redis_high_water: float = Field(default=0.9, gt=0, le=1)
    #: Rolling upgrades: a message of a newer schema version than this worker reads
    #: is requeued after this delay, for a newer worker; once it is older than the
    #: max age (no newer worker came), it is dead-lettered (retry it after the upgrade).
    newer_schema_delay_ms: int = Field(default=30_000, ge=10)
    newer_schema_max_age_ms: int = Field(default=24 * 3600 * 1000, ge=1000)
    # The HTTP API (`memjobs api`, started by `memjobs up`): see docs/http-api.md.
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8780, ge=0, le=65535)
    api_gateway_token: SecretStr | None = None
    api_host_token: SecretStr | None = None
    api_tls_cert: Path | None = None
    api_tls_key: Path | None = None
    api_max_body_bytes: int = Field(default=1_048_576, ge=1024)
    #: /v1 and /mcp requests whose handlers are at work at once (a slot is taken once the
    #: body is read and given back when the handler has produced its reply, not when the
    #: client has read it).
    api_max_in_flight: int = Field(default=64, ge=1)
    #: The same for the paths that need no token (/openapi.json, /console and its login):
    #: a pool of their own, so an unauthenticated flood cannot take a /v1 slot.
    api_max_public_in_flight: int = Field(default=8, ge=1)
    api_backend_timeout_ms: int = Field(default=10_000, ge=100)
    api_max_listing: int = Field(default=200, ge=1, le=10_000)
    #: Characters of a recall or knowledge-search query (422 over it).
    api_max_query_chars: int = Field(default=1000, ge=10, le=2000)
    #: Requests of one owner that may embed at once in one API process, running or
    #: waiting for the model (429 model_busy beyond, for that owner only).
    api_model_per_owner: int = Field(default=2, ge=1, le=64)
    #: Off loopback the API serves TLS (api_tls_cert/key) or says that a proxy in front
    #: terminates it (the Kubernetes ingress case): docs/security.md.
    api_tls_terminated_by_proxy: bool = False
    #: Requests one client address may have open at once (reading a body or in flight):
    #: well under api_max_in_flight, so one address cannot take every slot.
    api_max_per_client: int = Field(default=16, ge=1)
    #: Proxies (addresses or networks, comma-separated; "*" any) whose X-Forwarded-For
    #: names the client: the per-client cap then counts the real clients behind them.
    #: Empty: the header is ignored (no client can claim another address).
    api_forwarded_allow_ips: str = ""
    #: A request line and its headers must arrive within this of the request's first byte
    #: (of the connection's opening, for the first request), else the connection is closed
    #: (http/deadline.py: uvicorn has no such deadline).
    api_header_timeout_ms: int = Field(default=10_000, ge=100)
    #: A request's body must arrive within this once its headers are in (else 408); a
    #: reply's each write must be taken within it too (else the connection is closed).
    api_body_timeout_ms: int = Field(default=30_000, ge=100)
    #: uvicorn's HTTP/1.1 parser: h11 bounds a header block still arriving (64 KiB);
    #: httptools is faster but has no bound, so choose it only behind a proxy that
    #: bounds the headers' size (the shipped Caddy and ingress do). The header deadline
    #: (api_header_timeout_ms) holds with either.
    api_http_parser: Literal["h11", "httptools"] = "h11"
    #: Scoped tokens (``memjobs token issue``): HS256 keys; the previous one still verifies.
    api_token_key: SecretStr | None = None
    api_token_previous_key: SecretStr | None = None

    log_level: str = "INFO"
    #: ``<data dir>/logs/worker.log`` (written by ``memjobs up``) rotates past this size.
    log_max_bytes: int = Field(default=10 * 1024 * 1024, ge=0)
    log_backups: int = Field(default=5, ge=0)

    @property
    def metrics_dir(self) -> Path:
        """Prometheus multiprocess files of the worker processes on this host."""
        return self.data_dir / "run" / "prometheus"

    @field_validator(*_KEYS_AND_ADDRESSES, mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        """An empty or blank key, token, URL or path is none: ``DASHSCOPE_API_KEY=``
        (as ``.env.example`` ships it) is no key, so no model is configured by it."""
        if isinstance(value, SecretStr):
            return None if not value.get_secret_value().strip() else value
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator(*_API_CREDENTIALS, mode="before")
    @classmethod
    def _blank_credential_is_unset(cls, value: Any) -> Any:
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        return None if isinstance(raw, str) and not raw.strip() else value

    @model_validator(mode="wrap")
    @classmethod
    def _note_blank_credentials(cls, data: Any, handler: Any) -> Any:
        blank = set()
        if isinstance(data, dict):
            for name in _API_CREDENTIALS:
                value = data.get(name)
                raw = value.get_secret_value() if isinstance(value, SecretStr) else value
                if isinstance(raw, str) and raw and not raw.strip():
                    blank.add(name)
        settings = handler(data)
        if isinstance(settings, Settings):
            settings._blank_credentials = frozenset(blank)
        return settings

    @property
    def blank_credentials(self) -> frozenset[str]:
        """The API credentials given as spaces only (the API refuses to start with one)."""
        return self._blank_credentials

    @model_validator(mode="after")
    def _breaker_window_outlasts_its_probes(self) -> Settings:
        """An open breaker closes by itself after a window without a failure: a
        window no longer than the probe interval would close it between probes."""
        if self.model_breaker_window_ms <= self.model_breaker_probe_interval_ms:
            raise ValueError(
                "MEMJOBS_MODEL_BREAKER_WINDOW_MS must be longer than MEMJOBS_MODEL_BREAKER_PROBE_INTERVAL_MS"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _blank_memory_url_is_unset(cls, data: Any) -> Any:
        """A blank ``QWEN_AUDIO_MEMORY_BASE_URL`` is as if unset (the default, and
        no model configured by it); so is a blank ``MEMJOBS_DATA_DIR`` (the
        default, not the current directory)."""
        if isinstance(data, dict):
            for name in ("memory_base_url", "QWEN_AUDIO_MEMORY_BASE_URL", "data_dir"):
                value = data.get(name)
                if isinstance(value, str) and not value.strip():
                    data = {k: v for k, v in data.items() if k != name}
        return data

    @property
    def knowledge_root_paths(self) -> list[Path]:
        """:attr:`knowledge_roots` as absolute paths (``~`` expanded, symlinks resolved)."""
        roots = []
        for raw in self.knowledge_roots.split(os.pathsep):
            if raw.strip():
                roots.append(Path(raw.strip()).expanduser().resolve())
        return roots

    @field_validator("data_dir", mode="after")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @property
    def memory_enabled(self) -> bool:
        return self.memory_provider != "off"

    @property
    def model_configured(self) -> bool:
        """A model is configured when its endpoint has a key, or a custom endpoint
        was named (a local Ollama needs no key). DashScope without a key is none."""
        return self.memory_key is not None or not is_dashscope(self.memory_base_url)

    @property
    def memory_key(self) -> SecretStr | None:
        """The key sent to the light model's endpoint (see :meth:`key_for`)."""
        return self.key_for(
            self.memory_base_url,
            own=self.memory_api_key,
            other_url=self.embedding_base_url,
            other=self.embedding_api_key,
        )

    @property
    def embedding_key(self) -> SecretStr | None:
        """The key sent to the embedding endpoint (see :meth:`key_for`), None without one."""
        if self.embedding_base_url is None:
            return None
        return self.key_for(
            self.embedding_base_url,
            own=self.embedding_api_key,
            other_url=self.memory_base_url,
            other=self.memory_api_key,
        )

    def key_for(
        self, url: str, *, own: SecretStr | None, other_url: str | None, other: SecretStr | None
    ) -> SecretStr | None:
        """Which key an endpoint gets: its own; else the other endpoint's own key
        when both are the same endpoint; else ``DASHSCOPE_API_KEY`` when it is
        DashScope's; else none. A key never goes to an endpoint it was not given for."""
        if own is not None:
            return own
        if other is not None and other_url is not None and same_endpoint(url, other_url):
            return other
        return self.dashscope_api_key if is_dashscope(url) else None

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
        if self.embedding_configured:
            return self.embedding_dims
        return 384 if self.local_embedder == "e5" else self.offline_embedding_dims

    def source_rules(self) -> SourceRules:
        """The source rules (byte caps) both ends validate payloads against."""
        return SourceRules(max_text_bytes=self.max_text_bytes, max_transcript_bytes=self.max_transcript_bytes)

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
        # Which setting's key each endpoint is sent (never the key itself).
        out["memory_key_from"] = self._key_name(self.memory_key)
        out["embedding_key_from"] = self._key_name(self.embedding_key)
        return out

    def _key_name(self, key: SecretStr | None) -> str | None:
        for name, env in (
            ("memory_api_key", "QWEN_AUDIO_MEMORY_API_KEY"),
            ("embedding_api_key", "MEMJOBS_EMBEDDING_API_KEY"),
            ("dashscope_api_key", "DASHSCOPE_API_KEY"),
        ):
            if key is not None and key is getattr(self, name):
                return env
        return None


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
        query = urlencode([(k, "[REDACTED]" if k.lower() in _SECRET_PARAMS else v) for k, v in pairs], safe="[]")
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


def env_name(field: str) -> str:
    """The environment variable that sets the setting ``field``."""
    return _ENV_NAMES.get(field, f"MEMJOBS_{field.upper()}")


_ENV_NAMES = {
    "memory_provider": "NOVA_AUDIO_AGENT_MEMORY_PROVIDER",
    "NOVA_AUDIO_AGENT_MEMORY_PROVIDER": "NOVA_AUDIO_AGENT_MEMORY_PROVIDER",
    "memory_base_url": "QWEN_AUDIO_MEMORY_BASE_URL",
    "memory_model": "QWEN_AUDIO_MEMORY_MODEL",
    "memory_api_key": "QWEN_AUDIO_MEMORY_API_KEY",
    "dashscope_api_key": "DASHSCOPE_API_KEY",
    "memory_auto": "QWEN_AUDIO_MEMORY_AUTO",
    "QWEN_AUDIO_MEMORY_AUTO": "QWEN_AUDIO_MEMORY_AUTO",
    "session_digest": "QWEN_AUDIO_SESSION_DIGEST",
    "QWEN_AUDIO_SESSION_DIGEST": "QWEN_AUDIO_SESSION_DIGEST",
}
