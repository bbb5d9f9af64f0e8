"""The model-service boundary: chat completions and embeddings over any
OpenAI-compatible endpoint (DashScope, OpenAI, a local Ollama, …).

Transient failures (connection errors, timeouts, 429, 5xx) are retried with
exponential backoff by tenacity; what is left becomes ``ModelUnavailable``,
an outage: the job is retried on the outage time budget
(:class:`memjobs_worker.jobs.OutageRetries`) and no source leaves ``pending``.
Another 4xx becomes ``ModelUnavailable`` with reason ``model_rejected``, the
job's own failure (retried by count). Each attempt asks the service's circuit
breaker first (:mod:`memjobs_worker.model_breaker`): while it is open only its
probe calls, and every other attempt raises ``ModelUnavailable`` (reason
``model_circuit_open``) without a request. Every call, and every refusal
(outcome ``circuit_open``), reports (purpose, outcome, seconds) to a hook: built
from settings, :func:`~memjobs_worker.observability.metrics.record_model_call`.

The ``openai`` package (20 MB of a process) is imported when a client is first
used: the HTTP API and ``memjobs up`` build the clients of memory's engine and
never call them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import SecretStr
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from memjobs_client.errors import ModelUnavailable
from memjobs_worker.model_breaker import ModelBreaker, Ticket
from memjobs_worker.model_keys import model_configured, route_keys
from memjobs_worker.observability.metrics import record_model_call
from memjobs_worker.settings import EmbeddingSettings, ModelSettings

if TYPE_CHECKING:
    import openai

CallHook = Callable[[str, str, float], None]
T = TypeVar("T")


def _transient() -> tuple[type[openai.APIError], ...]:
    """The failures retried here (and counted by the breaker)."""
    import openai

    return (
        openai.APIConnectionError,  # includes APITimeoutError
        openai.RateLimitError,
        openai.InternalServerError,
    )


def _no_hook(purpose: str, outcome: str, seconds: float) -> None:
    return None


@dataclass(kw_only=True, eq=False)
class _OpenAICompatible:
    base_url: str
    api_key: str | None = field(repr=False)
    timeout_ms: int
    max_attempts: int
    on_call: CallHook = _no_hook
    breaker: ModelBreaker | None = None

    @cached_property
    def client(self) -> openai.OpenAI:
        """The client's own retries are off: tenacity owns the policy."""
        import openai

        return openai.OpenAI(
            base_url=self.base_url, api_key=self.api_key or "unused", timeout=self.timeout_ms / 1000, max_retries=0
        )

    @cached_property
    def headers(self) -> dict[str, Any]:
        """Without a key no Authorization header is sent at all (and OPENAI_API_KEY is not read)."""
        import openai

        return {} if self.api_key else {"Authorization": openai.Omit()}

    def _call(self, purpose: str, fn: Callable[[], T]) -> T:
        import openai

        transient = _transient()
        retrying = Retrying(
            stop=stop_after_attempt(self.max_attempts),
            wait=wait_exponential(multiplier=0.2, max=5),
            retry=retry_if_exception_type(transient),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    # A refusal is not retried here: the job is, on the outage budget.
                    ticket = self._admit(purpose)
                    started = time.perf_counter()
                    try:
                        result = fn()
                    except openai.APIError as exc:
                        self.on_call(purpose, _outcome(exc), time.perf_counter() - started)
                        if self.breaker is not None and isinstance(exc, transient):
                            self.breaker.failed(ticket)
                        raise
                    self.on_call(purpose, "ok", time.perf_counter() - started)
                    if self.breaker is not None:
                        self.breaker.succeeded(ticket)
                    return result
        except openai.APIError as exc:
            raise ModelUnavailable(
                f"{purpose} call failed after {self.max_attempts} attempt(s): {type(exc).__name__}",
                reason=None if isinstance(exc, transient) else ModelUnavailable.REJECTED,
            ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _admit(self, purpose: str) -> Ticket:
        """The breaker's ticket for one attempt.

        Raises:
            ModelUnavailable: the breaker is open and this is not its probe
                (reason ``model_circuit_open``; no request was made).
        """
        if self.breaker is None:
            return Ticket.CLOSED
        ticket = self.breaker.admit()
        if ticket is Ticket.REFUSED:
            self.on_call(purpose, "circuit_open", 0.0)
            raise ModelUnavailable(
                f"{purpose} not called: the {self.breaker.service} service's circuit breaker is open",
                reason="model_circuit_open",
            )
        return ticket

    def close(self) -> None:
        if "client" in self.__dict__:  # built on first use
            self.client.close()


def _outcome(exc: openai.APIError) -> str:
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.RateLimitError):
        return "rate_limited"
    if isinstance(exc, openai.APIStatusError):
        return "server_error" if exc.status_code >= 500 else "rejected"
    return "connection_error"


class ChatModel(_OpenAICompatible):
    """The light text model: the one chat-model type of the worker.

    Extraction (through mem0), consolidation and the digest all ask it
    (:func:`memjobs_worker.model_output.ask_json`); tests point it at a local
    server speaking the OpenAI API. ``generate_response`` has the shape mem0's
    LLMs have, so a :class:`ChatModel` stands in for mem0's own client.
    """

    def __init__(self, *, model: str, purpose: str = "extract", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model = model
        self.purpose = purpose

    def generate_response(
        self,
        messages: list[dict[str, str]],
        response_format: Any = None,
        tools: Any = None,
        tool_choice: str = "auto",
        **kwargs: Any,
    ) -> str:
        params: dict[str, Any] = {"model": self.model, "messages": messages, "extra_headers": self.headers}
        if response_format is not None:
            params["response_format"] = response_format
        response = self._call(self.purpose, lambda: self.client.chat.completions.create(**params))
        return response.choices[0].message.content or ""


class RemoteEmbedder(_OpenAICompatible):
    """Embeddings through the configured service, batched; mem0's embedder shape."""

    def __init__(self, *, model: str, dims: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model = model
        self.dims = dims

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        return self.embed_batch([text], memory_action)[0]

    def embed_batch(self, texts: Sequence[str], memory_action: str | None = None) -> list[list[float]]:
        texts = [t.replace("\n", " ") for t in texts]
        response = self._call(
            "embed",
            lambda: self.client.embeddings.create(
                model=self.model,
                input=list(texts),
                dimensions=self.dims,
                extra_headers=self.headers,
            ),
        )
        ordered = sorted(response.data, key=lambda d: d.index)
        return [list(d.embedding) for d in ordered]


# Built from settings -------------------------------------------------------


def _endpoint(
    model: ModelSettings, base_url: str, api_key: SecretStr | None, breaker: ModelBreaker | None
) -> dict[str, Any]:
    return {
        "breaker": breaker,
        "base_url": base_url,
        "api_key": api_key.get_secret_value() if api_key else None,
        "timeout_ms": model.timeout_ms,
        "max_attempts": model.max_attempts,
        "on_call": record_model_call,
    }


def chat_model(
    model: ModelSettings, embedding: EmbeddingSettings, purpose: str, breaker: ModelBreaker | None = None
) -> ChatModel | None:
    """The light model for ``purpose`` (a metrics label), or None when none is configured;
    ``breaker``: the chat service's (:func:`memjobs_worker.model_breaker.breakers`).

    Its endpoint gets its own key only (:mod:`memjobs_worker.model_keys`, which reads the
    embedding section for a shared endpoint's key): ``DASHSCOPE_API_KEY`` goes to
    DashScope alone, never to a custom ``QWEN_AUDIO_MEMORY_BASE_URL``."""
    if not model_configured(model, embedding):
        return None
    return ChatModel(
        model=model.name,
        purpose=purpose,
        **_endpoint(model, model.base_url, route_keys(model, embedding).chat, breaker),
    )


def remote_embedder(
    model: ModelSettings, embedding: EmbeddingSettings, breaker: ModelBreaker | None = None
) -> RemoteEmbedder | None:
    """The configured embedding service, or None when none is configured; its
    endpoint gets its own key only, as the light model's does (``model``: the
    client's timeouts and attempts, and the light model's key where it is the same endpoint)."""
    if embedding.base_url is None:
        return None
    return RemoteEmbedder(
        model=embedding.model,
        dims=embedding.dims,
        **_endpoint(model, embedding.base_url, route_keys(model, embedding).embedding, breaker),
    )
