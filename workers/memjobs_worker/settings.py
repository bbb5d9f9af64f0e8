"""Settings: read once at an entry point (CLI, worker process), then passed down by section.

:class:`Settings` is the data directory and one section per outside system or
feature: :class:`RedisSettings`, :class:`DatabaseSettings`, :class:`ModelSettings`
(the light text model), :class:`EmbeddingSettings`, :class:`MemorySettings`
(ledger and extraction), :class:`SessionSettings` (session end),
:class:`BlackboardSettings`, :class:`LifecycleSettings` (retention, erasure,
sweeping), :class:`KnowledgeSettings`, :class:`WorkerSettings` (Dramatiq and the
pools), :class:`MetricsSettings`, :class:`ApiSettings` and :class:`LogSettings`.
A part is handed the section it reads (the Redis client the Redis section), so
what it depends on shows in its signature.

Why each section is a ``BaseSettings`` of its own with the prefix it reads,
rather than nested models under one reader: the environment names are a
published interface (docs/configuration.md) and stay exactly as they were
(``MEMJOBS_REDIS_URL``, ``MEMJOBS_KNOWLEDGE``, and the names inherited from the
voice assistant: ``NOVA_AUDIO_AGENT_*``, ``QWEN_AUDIO_*``, ``DASHSCOPE_API_KEY``);
pydantic-settings' nested delimiter (``MEMJOBS_REDIS__URL``) would rename them.
So each section names its prefix (``MEMJOBS_REDIS_`` + ``url``) and gives an
outlier its full name as an alias, and :meth:`Section.env_name` derives the
variable of any field from that, for error messages and ``memjobs config``.

Blank values: ``env_ignore_empty`` makes an empty variable unset (the default);
keys, tokens, URLs and paths also treat a value of spaces as none
(:data:`OptionalSecret` and friends), and the API notes a credential given as
spaces, for the API to refuse to start (a token meant to be set must not leave
the door open). Durations carry their unit.

The key-routing policy (which key each model endpoint is sent) lives beside the
model client, in :mod:`memjobs_worker.model_keys`; URL redaction beside the logs,
in :func:`memjobs_worker.logs.redaction.redact_url`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from memjobs_client.contracts import (
    DEFAULT_MAX_KNOWLEDGE_DOC_CHARS,
    DEFAULT_MAX_TEXT_BYTES,
    DEFAULT_MAX_TRANSCRIPT_BYTES,
    SourceRules,
)
from memjobs_client.errors import ConfigurationError
from memjobs_worker.logs.redaction import redact_url
from memjobs_worker.model_keys import DASHSCOPE_COMPATIBLE_URL, ModelKeys, model_configured, route_keys

REDACTED = "[REDACTED]"


def _blank(value: Any) -> bool:
    raw = value.get_secret_value() if isinstance(value, SecretStr) else value
    return isinstance(raw, str) and not raw.strip()


def _blank_is_none(value: Any) -> Any:
    """An empty or blank key, token, URL or path is none: ``DASHSCOPE_API_KEY=``
    (as ``.env.example`` ships it) is no key, so no model is configured by it."""
    return None if _blank(value) else value


def _default_data_dir() -> Path:
    return Path.home() / ".memjobs"


def _data_dir(value: Any) -> Any:
    """A blank data directory is the default, not the current directory; ``~`` is expanded."""
    if _blank(value):
        value = _default_data_dir()
    return Path(value).expanduser().resolve() if isinstance(value, str | Path) else value


OptionalText = Annotated[str | None, BeforeValidator(_blank_is_none)]
OptionalSecret = Annotated[SecretStr | None, BeforeValidator(_blank_is_none)]
OptionalPath = Annotated[Path | None, BeforeValidator(_blank_is_none)]
DataDir = Annotated[Path, BeforeValidator(_data_dir)]
#: A blank ``QWEN_AUDIO_MEMORY_BASE_URL`` is as if unset (the default, and no model configured by it).
ModelUrl = Annotated[str, BeforeValidator(lambda v: DASHSCOPE_COMPATIBLE_URL if _blank(v) else v)]
#: How many days something is kept: at least one.
Days = Annotated[int, Field(ge=1)]


def _alias(name: str, default: Any = None) -> Any:
    """A field read from the variable ``name`` rather than the section's prefix."""
    return Field(default=default, validation_alias=AliasChoices(name))


class Section(BaseSettings):
    """One section of the settings, read from the variables under its prefix."""

    model_config = SettingsConfigDict(
        env_prefix="MEMJOBS_", extra="ignore", populate_by_name=True, env_ignore_empty=True
    )

    @classmethod
    def env_name(cls, field: str) -> str:
        """The environment variable that sets ``field`` (a field name, or already an alias)."""
        info = cls.model_fields.get(field)
        if info is None:
            return field.upper()
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            return str(alias.choices[0])
        if isinstance(alias, str):
            return alias
        return f"{cls.model_config.get('env_prefix', '')}{field}".upper()


class RedisSettings(Section):
    """Redis: where it is, how long one call may take, its durability and fill line."""

    model_config = SettingsConfigDict(env_prefix="MEMJOBS_REDIS_")

    #: Unset: the embedded Redis in the data directory.
    url: OptionalText = None
    # Redis durability (issue 13). The embedded Redis fsyncs its append-only file
    # on every write by default, so an acknowledged job survives kill -9 of Redis;
    # WAITAOF (Redis ≥ 7.2) makes producers wait for the fsync locally and/or on
    # replicas before returning.
    appendfsync: Literal["always", "everysec", "no"] = "always"
    waitaof_local: int = Field(default=0, ge=0, le=1)
    waitaof_replicas: int = Field(default=0, ge=0)
    #: Bound on one Redis call (connect, read) for producers, workers and locks:
    #: a call during an outage fails with BackendUnavailable within about this.
    timeout_ms: int = Field(default=5_000, ge=100)
    #: Redis Sentinel: "host:port,host:port"; when set, the master is found
    #: through the sentinels under ``sentinel_master`` (the URL's db and
    #: password still apply).
    sentinels: OptionalText = None
    sentinel_master: str = "memjobs"
    #: Producers refuse new jobs (RedisFull; HTTP 503 redis_full) while Redis uses
    #: this share of its maxmemory, leaving the rest to the workers draining it;
    #: 1: only Redis's own refusal at maxmemory. Without maxmemory: no effect.
    high_water: float = Field(default=0.9, gt=0, le=1)


#: How long the embedded PostgreSQL's pooled connections stay open unused.
EMBEDDED_POOL_IDLE_S = 10.0


class DatabaseSettings(Section):
    """PostgreSQL, the state database."""

    model_config = SettingsConfigDict(env_prefix="MEMJOBS_DATABASE_")

    #: Unset: the embedded PostgreSQL in the data directory.
    url: OptionalText = None
    #: A process's pooled connections are closed once none has been used for this
    #: many seconds (each is a server process of 14-20 MB); 0: kept while the
    #: process lives. Unset: 10 s for the embedded PostgreSQL (an idle laptop stack
    #: keeps no backends), kept for a server the URL names.
    pool_idle_s: float | None = Field(default=None, ge=0)

    @property
    def idle_close_s(self) -> float | None:
        """Seconds a quiet pool keeps its connections, None: kept (see :attr:`pool_idle_s`)."""
        if self.pool_idle_s is not None:
            return self.pool_idle_s or None
        return EMBEDDED_POOL_IDLE_S if self.url is None else None


class ModelSettings(Section):
    """The light text model (fact extraction, consolidation, digests) and its client."""

    model_config = SettingsConfigDict(env_prefix="MEMJOBS_MODEL_")

    base_url: ModelUrl = Field(
        default=DASHSCOPE_COMPATIBLE_URL, validation_alias=AliasChoices("QWEN_AUDIO_MEMORY_BASE_URL")
    )
    name: str = Field(default="qwen-flash", validation_alias=AliasChoices("QWEN_AUDIO_MEMORY_MODEL"))
    #: The key of the endpoint above, whatever it is; sent to it alone.
    api_key: OptionalSecret = _alias("QWEN_AUDIO_MEMORY_API_KEY")
    #: DashScope's key: sent only to DashScope's endpoint (the default base URL),
    #: never to another one (:mod:`memjobs_worker.model_keys`).
    dashscope_api_key: OptionalSecret = _alias("DASHSCOPE_API_KEY")
    timeout_ms: int = Field(default=30_000, gt=0)
    max_attempts: int = Field(default=3, ge=1)
    #: The circuit breaker of each model service, shared by every host
    #: (memjobs_worker.model_breaker): this many outage failures (refused,
    #: timed out, 429, 5xx) within breaker_window_ms open it; while open,
    #: one probe call per breaker_probe_interval_ms (across hosts) is
    #: made, and its success closes it; a window without any failure closes it too.
    breaker_failures: int = Field(default=5, ge=1)
    breaker_window_ms: int = Field(default=30_000, ge=100)
    breaker_probe_interval_ms: int = Field(default=2_000, ge=10)

    @model_validator(mode="after")
    def _breaker_window_outlasts_its_probes(self) -> ModelSettings:
        """An open breaker closes by itself after a window without a failure: a
        window no longer than the probe interval would close it between probes."""
        if self.breaker_window_ms <= self.breaker_probe_interval_ms:
            raise ValueError(
                "MEMJOBS_MODEL_BREAKER_WINDOW_MS must be longer than MEMJOBS_MODEL_BREAKER_PROBE_INTERVAL_MS"
            )
        return self


class EmbeddingSettings(Section):
    """Embeddings: an OpenAI-compatible endpoint, or the local embedder (docs/embeddings.md)."""

    model_config = SettingsConfigDict(env_prefix="MEMJOBS_EMBEDDING_")

    base_url: OptionalText = None
    model: str = "text-embedding-v4"
    api_key: OptionalSecret = None
    dims: int = Field(default=1024, gt=0, le=16_000)
    offline_dims: int = Field(
        default=512, gt=0, le=4096, validation_alias=AliasChoices("MEMJOBS_OFFLINE_EMBEDDING_DIMS")
    )
    #: With no embedding service: "e5", the local multilingual model (the default;
    #: docs/embeddings.md), or "hashing", the hashed embedder (a test double and an
    #: explicit fallback: lexical only, and knowledge then ranks by keywords).
    local_embedder: Literal["e5", "hashing"] = _alias("MEMJOBS_LOCAL_EMBEDDER", "e5")
    #: OpenMP threads of one local-model call (each process holds its own model).
    local_embedder_threads: int = Field(
        default=1, ge=1, le=64, validation_alias=AliasChoices("MEMJOBS_LOCAL_EMBEDDER_THREADS")
    )
    #: Characters of one text embedded at most: the rest is not sent to the service nor
    #: tokenised by the local model (which then reads its 512-token window at most).
    max_chars: int = Field(default=8192, ge=100, le=1_000_000)
    #: Embeddings one process runs at once; one owner holds at most one of them
    #: (docs/security.md, "Bounded work").
    slots: int = Field(default=2, ge=1, le=64)
    #: The same with an embedding service: its calls wait on the network, not on
    #: this process's cores, so more go at once (a worker's extraction threads
    #: each call it twice a batch); one owner still holds at most one.
    service_slots: int = Field(default=16, ge=1, le=256)
    #: Concurrent short questions embedded together in local-model calls, spread
    #: over the slots (docs/benchmarks.md "Concurrent recall"); false: one call each.
    batch_queries: bool = True

    @property
    def configured(self) -> bool:
        """An embedding service is named (else the local embedder runs)."""
        return self.base_url is not None

    @property
    def share_slots(self) -> int:
        """Embeddings one process runs at once: :attr:`service_slots` with a
        service, :attr:`slots` with the local model."""
        return self.service_slots if self.configured else self.slots

    @property
    def vector_dims(self) -> int:
        """Dimensions of the vectors stored: the service's, e5's 384 or the hashed embedder's."""
        if self.configured:
            return self.dims
        return 384 if self.local_embedder == "e5" else self.offline_dims


class MemorySettings(Section):
    """Personal memory: the engine, the ledger and extraction."""

    #: mem0, or off.
    provider: Literal["mem0", "off"] = Field(
        default="mem0", validation_alias=AliasChoices("NOVA_AUDIO_AGENT_MEMORY_PROVIDER")
    )
    max_text_bytes: int = Field(default=DEFAULT_MAX_TEXT_BYTES, gt=0)
    extract_batch_size: int = Field(default=10, ge=1, le=100)
    #: Sources per extraction call for an owner with two full batches pending
    #: or more (a backlog), and what a fast stream's batch waits for (an owner
    #: whose sources would fill it within extract_max_wait_ms): fewer, larger
    #: calls; at most extract_batch_size: off.
    extract_deep_batch_size: int = Field(default=40, ge=1, le=100)
    #: UTF-8 bytes of source text one extraction call carries at most (its first
    #: source goes whatever its size): the prompt stays near one largest source
    #: (max_text_bytes), however many sources a deep batch may hold.
    extract_batch_bytes: int = Field(default=DEFAULT_MAX_TEXT_BYTES, ge=1_024)
    #: Sources per learning batch without a chat model (stored verbatim: one
    #: embedding call and one insert a batch).
    verbatim_batch_size: int = Field(default=50, ge=1, le=1000)
    # Micro-batching: an owner's extraction starts when its pending sources
    # fill a batch, or it has had no new source for extract_delay_ms (the quiet
    # period; for an owner whose sources come as a stream, its gap and the gap's
    # excess over the quiet period), or its oldest pending source has waited
    # extract_max_wait_ms (so a steady source a second makes batches of about 8,
    # 0.14 chat calls a source, learned p95 7.5 s: docs/benchmarks.md).
    extract_delay_ms: int = Field(default=500, ge=0)
    extract_max_wait_ms: int = Field(default=7_000, ge=0)
    #: An owner's "extraction queued" marker (the debounce flag) lasts this long
    #: unless the extraction starts first (or is retried: set again): a message
    #: lost with Redis's data leaves its owner to the sweeper after this long.
    extract_marker_ttl_ms: int = Field(default=900_000, ge=1_000)
    lease_ms: int = Field(default=10_000, ge=300)
    recall_min_score: float = Field(default=0.1, ge=0.0, le=1.0)

    @property
    def enabled(self) -> bool:
        return self.provider != "off"


class SessionSettings(Section):
    """Session end: automatic consolidation into USER.md / MEMORY.md, digests."""

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


class BlackboardSettings(Section):
    """The L0 blackboard of each session (the seeds' three limits, per session), and
    the seeds' own settings, read by ``memjobs blackboard import`` for its defaults."""

    model_config = SettingsConfigDict(env_prefix="MEMJOBS_BLACKBOARD_")

    retention_days: Days = 7
    max_entries: int = Field(default=1000, ge=1)
    max_bytes: int = Field(default=8 * 1024 * 1024, ge=64 * 1024)
    path: Path = Field(
        default_factory=lambda: Path.home() / ".nova-audio-agent" / "blackboard.sqlite",
        validation_alias=AliasChoices("NOVA_AUDIO_AGENT_BLACKBOARD_PATH"),
    )
    owner_id: str | None = _alias("NOVA_AUDIO_AGENT_BLACKBOARD_OWNER_ID")


class LifecycleSettings(Section):
    """What the sweeper and an erasure keep, and how often the sweeper looks."""

    digest_retention_days: Days = 90
    task_retention_days: Days = 3
    #: Memory audit rows (the memory_audit table) older than this are deleted by the sweeper.
    memory_audit_retention_days: Days = 90
    # An owner's erasure (memjobs erase, DELETE /v1/owners): how long the owner's
    # jobs are dropped after it ends, and how long it waits for jobs already running.
    erase_hold_ms: int = Field(default=3_600_000, ge=1000)
    erase_wait_ms: int = Field(default=60_000, ge=0)
    sweep_pending_after_ms: int = Field(default=15_000, ge=0)
    sweep_interval_ms: int = Field(default=5_000, ge=100)


class KnowledgeSettings(Section):
    """Knowledge (the user's own documents), opt-in: off creates no table, no
    worker consumes its queue, no MCP server; personal memory is unaffected."""

    model_config = SettingsConfigDict(env_prefix="MEMJOBS_KNOWLEDGE_")

    mode: Literal["on", "off"] = Field(default="off", validation_alias=AliasChoices("MEMJOBS_KNOWLEDGE"))
    chunk_chars: int = Field(default=500, ge=50, le=8000)
    chunk_overlap_chars: int = Field(default=80, ge=0)
    max_doc_chars: int = Field(default=DEFAULT_MAX_KNOWLEDGE_DOC_CHARS, ge=100)
    max_file_bytes: int = Field(default=2_000_000, ge=100)
    max_corpus_chars: int = Field(default=5_000_000, ge=1000)
    embed_batch: int = Field(default=32, ge=1, le=2048)
    #: How long one reindex_knowledge attempt may run before it is stopped (and retried).
    reindex_time_limit_ms: int = Field(default=3_600_000, ge=10_000)
    #: The host's allowed roots: files are read only under one of these (and under
    #: the roots a reindex names), separated by the OS path separator (":").
    roots: str = "~"

    @property
    def enabled(self) -> bool:
        return self.mode == "on"

    @property
    def root_paths(self) -> list[Path]:
        """:attr:`roots` as absolute paths (``~`` expanded, symlinks resolved)."""
        return [Path(raw.strip()).expanduser().resolve() for raw in self.roots.split(os.pathsep) if raw.strip()]


class WorkerSettings(Section):
    """Dramatiq's retries, the broker's heartbeats, the worker pools."""

    max_retries: int = Field(default=10, ge=0)
    min_backoff_ms: int = Field(default=1_000, ge=1)
    max_backoff_ms: int = Field(default=300_000, ge=1)
    #: A job failing because Redis or the database is unreachable (or the
    #: database is read-only: a failover) is retried for this long since its
    #: first such failure without counting against max_retries, at most
    #: outage_max_backoff_ms apart; then the ordinary retries take over.
    outage_retry_budget_ms: int = Field(default=1_800_000, ge=0)
    outage_max_backoff_ms: int = Field(default=5_000, ge=10)
    #: A worker process silent this long is dead and its messages are requeued.
    #: Each process beats every ``heartbeat_interval_ms`` from a thread of its
    #: own, so a long job never silences it (keep it ≥ 3 intervals).
    broker_heartbeat_timeout_ms: int = Field(default=15_000, ge=1_000)
    heartbeat_interval_ms: int = Field(default=5_000, ge=100)
    heartbeat_ttl_ms: int = Field(default=15_000, ge=300)
    worker_processes: int = Field(default=1, ge=1)
    worker_threads: int = Field(default=4, ge=1)
    # The cheap jobs' own pool (remember, forget, task status); 0 processes:
    # one pool takes every queue.
    fast_worker_processes: int = Field(default=1, ge=0)
    fast_worker_threads: int = Field(default=32, ge=1)
    # Pools sharing one process: an extraction's next batch waits while the cheap
    # pool has work, up to this long (0: never; pools.SharedWorker.cheap_first).
    cheap_first_ms: int = Field(default=1_000, ge=0)
    # The pools in one process (shared), each in processes of its own (split), or
    # shared on a small host when each pool has one process (auto; pools.py).
    worker_layout: Literal["auto", "shared", "split"] = "auto"
    #: The longest a pool that takes cheap jobs sleeps between looks at an empty
    #: queue (Dramatiq's idle backoff, 1 s by default): a remember after a quiet
    #: spell reaches the ledger within it. An idle process looks about 15 times a
    #: second per queue at 100 ms.
    fast_worker_poll_ms: int = Field(default=100, ge=10, le=1_000)
    #: Rolling upgrades: a message of a newer schema version than this worker reads
    #: is requeued after this delay, for a newer worker; once it is older than the
    #: max age (no newer worker came), it is dead-lettered (retry it after the upgrade).
    newer_schema_delay_ms: int = Field(default=30_000, ge=10)
    newer_schema_max_age_ms: int = Field(default=24 * 3600 * 1000, ge=1000)


class MetricsSettings(Section):
    """The Prometheus endpoint."""

    model_config = SettingsConfigDict(env_prefix="MEMJOBS_METRICS_")

    mode: Literal["on", "off"] = Field(default="on", validation_alias=AliasChoices("MEMJOBS_METRICS"))
    host: str = "127.0.0.1"
    port: int = Field(default=9191, ge=0, le=65535)
    # Off for all but one pool of a host: the others' processes write to the same
    # multiprocess directory, and the one endpoint serves them merged.
    endpoint: bool = True
    #: what a metrics port another process holds means: a warning, or a start-up error.
    bind_failure: Literal["warn", "fail"] = "warn"


#: The API's credentials: a blank one is none too, but one given as spaces is also noted
#: (:attr:`ApiSettings.blank_credentials`).
_API_CREDENTIALS = ("gateway_token", "host_token", "token_key", "token_previous_key")


class ApiSettings(Section):
    """The HTTP API (``memjobs api``, started by ``memjobs up``): see docs/http-api.md."""

    model_config = SettingsConfigDict(env_prefix="MEMJOBS_API_")
    _blank_credentials: frozenset[str] = PrivateAttr(default=frozenset())

    host: str = "127.0.0.1"
    port: int = Field(default=8780, ge=0, le=65535)
    gateway_token: OptionalSecret = None
    host_token: OptionalSecret = None
    tls_cert: OptionalPath = None
    tls_key: OptionalPath = None
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    #: /v1 and /mcp requests whose handlers are at work at once (a slot is taken once the
    #: body is read and given back when the handler has produced its reply, not when the
    #: client has read it).
    max_in_flight: int = Field(default=64, ge=1)
    #: The same for the paths that need no token (/openapi.json, /console and its login):
    #: a pool of their own, so an unauthenticated flood cannot take a /v1 slot.
    max_public_in_flight: int = Field(default=8, ge=1)
    backend_timeout_ms: int = Field(default=10_000, ge=100)
    max_listing: int = Field(default=200, ge=1, le=10_000)
    #: Characters of a recall or knowledge-search query (422 over it).
    max_query_chars: int = Field(default=1000, ge=10, le=2000)
    #: Requests of one owner that may embed at once in one API process, running or
    #: waiting for the model (429 model_busy beyond, for that owner only).
    model_per_owner: int = Field(default=2, ge=1, le=64)
    #: Off loopback the API serves TLS (tls_cert/key) or says that a proxy in front
    #: terminates it (the Kubernetes ingress case): docs/security.md.
    tls_terminated_by_proxy: bool = False
    #: Requests one client address may have open at once (reading a body or in flight):
    #: well under max_in_flight, so one address cannot take every slot.
    max_per_client: int = Field(default=16, ge=1)
    #: Proxies (addresses or networks, comma-separated; "*" any) whose X-Forwarded-For
    #: names the client: the per-client cap then counts the real clients behind them.
    #: Empty: the header is ignored (no client can claim another address).
    forwarded_allow_ips: str = ""
    #: A request line and its headers must arrive within this of the request's first byte
    #: (of the connection's opening, for the first request), else the connection is closed
    #: (http/deadline.py: uvicorn has no such deadline).
    header_timeout_ms: int = Field(default=10_000, ge=100)
    #: A request's body must arrive within this once its headers are in (else 408); a
    #: reply's each write must be taken within it too (else the connection is closed).
    body_timeout_ms: int = Field(default=30_000, ge=100)
    #: uvicorn's HTTP/1.1 parser: h11 bounds a header block still arriving (64 KiB);
    #: httptools is faster but has no bound, so choose it only behind a proxy that
    #: bounds the headers' size (the shipped Caddy and ingress do). The header deadline
    #: (header_timeout_ms) holds with either.
    http_parser: Literal["h11", "httptools"] = "h11"
    #: Scoped tokens (``memjobs token issue``): HS256 keys; the previous one still verifies.
    token_key: OptionalSecret = None
    token_previous_key: OptionalSecret = None

    @model_validator(mode="wrap")
    @classmethod
    def _note_blank_credentials(cls, data: Any, handler: Any) -> Any:
        if isinstance(data, ApiSettings):  # a section already built (in a Settings): noted then
            return handler(data)
        blank = set()
        if isinstance(data, dict):
            for name in _API_CREDENTIALS:
                value = data.get(name, data.get(cls.env_name(name)))
                raw = value.get_secret_value() if isinstance(value, SecretStr) else value
                if isinstance(raw, str) and raw and not raw.strip():
                    blank.add(name)
        settings = handler(data)
        if isinstance(settings, ApiSettings):
            settings._blank_credentials = frozenset(blank)
        return settings

    @property
    def blank_credentials(self) -> frozenset[str]:
        """The credentials given as spaces only (the API refuses to start with one)."""
        return self._blank_credentials


class LogSettings(Section):
    """The JSON Lines log of the worker processes."""

    model_config = SettingsConfigDict(env_prefix="MEMJOBS_LOG_")

    level: str = "INFO"
    #: ``<data dir>/logs/worker.log`` (written by ``memjobs up``) rotates past this size.
    max_bytes: int = Field(default=10 * 1024 * 1024, ge=0)
    backups: int = Field(default=5, ge=0)


class _DataDirSettings(Section):
    data_dir: DataDir = Field(default_factory=_default_data_dir)


def _read_data_dir() -> Path:
    return _DataDirSettings().data_dir


@dataclass(frozen=True)
class Entry:
    """One setting as ``memjobs config``, the state file and backups show it."""

    key: str  #: ``section.field`` (``data_dir`` at the top)
    env: str  #: the environment variable that sets it
    value: Any
    secret: bool
    from_env: bool  #: set (from the environment or by the caller), not the default


class Settings(BaseModel):
    """Every knob memjobs has, by section; see docs/configuration.md.

    ``Settings()`` reads every section from the environment; a section given as a
    mapping (``Settings(redis={"url": url})``) reads the rest of that section from
    the environment too, as ``RedisSettings(url=url)`` would. An unknown keyword is
    an error (a setting's old flat name, ``redis_url=``, must not pass unnoticed)."""

    model_config = ConfigDict(extra="forbid")

    #: Unset URLs (Redis, the database) mean "the embedded stack in data_dir".
    data_dir: DataDir = Field(default_factory=_read_data_dir)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    sessions: SessionSettings = Field(default_factory=SessionSettings)
    blackboard: BlackboardSettings = Field(default_factory=BlackboardSettings)
    lifecycle: LifecycleSettings = Field(default_factory=LifecycleSettings)
    knowledge: KnowledgeSettings = Field(default_factory=KnowledgeSettings)
    workers: WorkerSettings = Field(default_factory=WorkerSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    logs: LogSettings = Field(default_factory=LogSettings)

    SECTIONS: ClassVar[tuple[str, ...]] = (
        "redis",
        "database",
        "model",
        "embedding",
        "memory",
        "sessions",
        "blackboard",
        "lifecycle",
        "knowledge",
        "workers",
        "metrics",
        "api",
        "logs",
    )

    @model_validator(mode="before")
    @classmethod
    def _sections_read_the_environment(cls, data: Any) -> Any:
        """A section given as a mapping is built by its own class, which reads the
        variables the mapping leaves out (pydantic would take the defaults)."""
        if isinstance(data, dict):
            data = dict(data)
            for name in cls.SECTIONS:
                if isinstance(data.get(name), dict):
                    data[name] = cls.section_type(name)(**data[name])
        return data

    @classmethod
    def section_type(cls, name: str) -> type[Section]:
        """The class of the section ``name`` (``RedisSettings`` for ``redis``)."""
        annotation = cls.model_fields[name].annotation
        assert isinstance(annotation, type) and issubclass(annotation, Section)
        return annotation

    def updated(self, **sections: dict[str, Any]) -> Settings:
        """A copy with the named sections' fields changed, not validated again (the
        values come from settings already read), e.g. ``settings.updated(api={"port": 0})``.
        The data directory is no section: ``model_copy(update={"data_dir": path})``."""
        update = {name: getattr(self, name).model_copy(update=changes) for name, changes in sections.items()}
        return self.model_copy(update=update)

    @property
    def metrics_dir(self) -> Path:
        """Prometheus multiprocess files of the worker processes on this host."""
        return self.data_dir / "run" / "prometheus"

    @property
    def model_keys(self) -> ModelKeys:
        """The key each model endpoint is sent (:mod:`memjobs_worker.model_keys`)."""
        return route_keys(self.model, self.embedding)

    @property
    def model_configured(self) -> bool:
        return model_configured(self.model, self.embedding)

    @property
    def consolidation_enabled(self) -> bool:
        """Automatic consolidation: on unless QWEN_AUDIO_MEMORY_AUTO=off, and only
        with a model configured (no key: off; explicit memory is unaffected)."""
        return self.sessions.memory_auto == "on" and self.model_configured

    @property
    def digest_enabled(self) -> bool:
        return self.sessions.session_digest == "on" and self.model_configured

    def source_rules(self) -> SourceRules:
        """The source rules (byte caps) both ends validate payloads against."""
        return SourceRules(
            max_text_bytes=self.memory.max_text_bytes, max_transcript_bytes=self.sessions.max_transcript_bytes
        )

    def entries(self) -> Iterator[Entry]:
        """Every setting, ``data_dir`` first, then section by section."""
        yield Entry("data_dir", "MEMJOBS_DATA_DIR", self.data_dir, False, "data_dir" in self.model_fields_set)
        for name in self.SECTIONS:
            section: Section = getattr(self, name)
            for field, info in type(section).model_fields.items():
                yield Entry(
                    f"{name}.{field}",
                    section.env_name(field),
                    getattr(section, field),
                    "SecretStr" in str(info.annotation),
                    field in section.model_fields_set,
                )

    def entry(self, key: str) -> Entry:
        """The setting ``section.field`` (or ``data_dir``)."""
        for entry in self.entries():
            if entry.key == key:
                return entry
        raise KeyError(key)

    def redacted(self) -> dict[str, Any]:
        """The effective settings as JSON-ready values keyed ``section.field``, secrets replaced."""
        out: dict[str, Any] = {}
        for entry in self.entries():
            value = entry.value
            if isinstance(value, SecretStr):
                value = REDACTED
            elif entry.key.endswith("url") and isinstance(value, str):
                value = redact_url(value)
            elif isinstance(value, Path):
                value = str(value)
            out[entry.key] = value
        keys = self.model_keys
        out["model_configured"] = self.model_configured
        out["consolidation_enabled"] = self.consolidation_enabled
        out["digest_enabled"] = self.digest_enabled
        out["embedding_configured"] = self.embedding.configured
        # Which setting's key each endpoint is sent (never the key itself).
        out["memory_key_from"] = keys.chat_from
        out["embedding_key_from"] = keys.embedding_from
        return out


def load_settings(**overrides: Any) -> Settings:
    """Read the settings from the environment, turning mistakes into one clear error
    naming every variable at fault. ``overrides``: a mapping per section name
    (``redis={"url": …}``), or ``data_dir``.

    Raises:
        ConfigurationError: a value is invalid, e.g. an unknown memory provider.
    """
    problems: list[str] = []
    built: dict[str, Any] = {}

    def note(cls: type[Section], exc: ValidationError) -> None:
        for err in exc.errors(include_input=False):
            field = ".".join(str(p) for p in err["loc"])
            where = f"{cls.env_name(field)}: " if field else ""
            problems.append(f"{where}{err['msg']}")

    try:
        given = overrides.get("data_dir")
        read = _DataDirSettings(**({} if given is None else {"data_dir": given}))
        if "data_dir" in read.model_fields_set:  # else the default, and shown as one
            built["data_dir"] = read.data_dir
    except ValidationError as exc:
        note(_DataDirSettings, exc)
    for name in Settings.SECTIONS:
        cls = Settings.section_type(name)
        try:
            built[name] = cls(**overrides.get(name, {}))
        except ValidationError as exc:
            note(cls, exc)
    if problems:
        raise ConfigurationError("invalid settings: " + "; ".join(problems)) from None
    return Settings(**built)


def env_name(key: str) -> str:
    """The environment variable that sets the setting ``key`` (``section.field`` or ``data_dir``)."""
    if key == "data_dir":
        return "MEMJOBS_DATA_DIR"
    section, _, field = key.partition(".")
    return Settings.section_type(section).env_name(field)


def setting_keys() -> dict[str, str]:
    """Every setting's key (``section.field``, or ``data_dir``) and the environment
    variable that sets it: the published names (docs/configuration.md)."""
    keys = {"data_dir": "MEMJOBS_DATA_DIR"}
    for name in Settings.SECTIONS:
        cls = Settings.section_type(name)
        keys.update({f"{name}.{field}": cls.env_name(field) for field in cls.model_fields})
    return keys


def default_of(key: str) -> Any:
    """The default of the setting ``key`` (``section.field``), as the code states it."""
    section, _, field = key.partition(".")
    return Settings.section_type(section).model_fields[field].get_default(call_default_factory=True)
