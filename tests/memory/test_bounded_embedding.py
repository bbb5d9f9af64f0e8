"""What one text or one owner may make a process's model compute (issue 31,
items 1 and 2), without a server: the local model reads one window of a long
text; an embedder takes turns on the process's model share, one owner at most
one running and a bounded number open, the owners served in turn; an
abandoned request's embedding that has not started is never computed; a
worker's job embeds as its owner."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import dramatiq
import pytest

from memjobs_worker.embedding import build_embedder, model_share
from memjobs_worker.embedding.fair import (
    ANONYMOUS,
    Abandoned,
    BoundedEmbedder,
    Claim,
    ModelBusy,
    ModelShare,
    OwnerTurns,
    current_party,
)
from memjobs_worker.embedding.local import WINDOW_TOKENS, LocalEmbedder, _load, fit_window
from memjobs_worker.settings import ApiSettings, EmbeddingSettings, ModelSettings

WAIT_S = 30  # a generous bound on an event that follows at once


class GatedModel:
    """An embedder whose every call announces itself and then waits to be let go."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.calls: dict[str, threading.Event] = {}
        self.release: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.texts: list[str] = []

    def prepare(self, text: str) -> None:
        self.calls[text] = threading.Event()
        self.release[text] = threading.Event()

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        with self.lock:
            self.started.append(text)
        self.calls[text].set()
        assert self.release[text].wait(WAIT_S)
        return [1.0]

    def embed_batch(self, texts: list[str], memory_action: str | None = None) -> list[list[float]]:
        self.texts += texts
        return [[1.0] for _ in texts]


@pytest.fixture
def threads() -> Iterator[Callable[..., threading.Thread]]:
    started: list[threading.Thread] = []

    def start(fn: Callable[[], Any]) -> threading.Thread:
        errors: list[BaseException] = []

        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - kept for the test to read
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.errors = errors  # type: ignore[attr-defined]
        thread.start()
        started.append(thread)
        return thread

    yield start
    for thread in started:
        thread.join(WAIT_S)


def embed_as(
    share: ModelShare, model: GatedModel, party: str, text: str, claim: Claim | None = None
) -> Callable[[], None]:
    embedder = BoundedEmbedder(model, share, max_chars=100)

    def run() -> None:
        with share.party(party, claim):
            embedder.embed(text)

    return run


def test_an_owner_with_its_requests_open_is_refused_and_others_are_not() -> None:
    share = ModelShare(slots=2, per_party=2)
    with ExitStack() as held:
        held.enter_context(share.party("attacker"))
        held.enter_context(share.party("attacker"))
        with pytest.raises(ModelBusy, match="2 embeddings"):
            held.enter_context(share.party("attacker"))
        held.enter_context(share.party("victim"))
        assert share.open_requests("attacker") == 2 and share.open_requests("victim") == 1
    assert share.open_requests("attacker") == 0


def test_an_owner_runs_one_embedding_at_a_time_and_another_owner_takes_the_free_slot(
    threads: Callable[..., threading.Thread],
) -> None:
    share, model = ModelShare(slots=2, per_party=2), GatedModel()
    for text in ("a1", "a2", "v1"):
        model.prepare(text)
    threads(embed_as(share, model, "attacker", "a1"))
    assert model.calls["a1"].wait(WAIT_S)
    threads(embed_as(share, model, "attacker", "a2"))
    threads(embed_as(share, model, "victim", "v1"))
    assert model.calls["v1"].wait(WAIT_S)  # the victim runs beside the attacker's first ...
    assert model.started == ["a1", "v1"]  # ... whose second waits though a slot was free
    model.release["v1"].set()
    model.release["a1"].set()
    assert model.calls["a2"].wait(WAIT_S)
    model.release["a2"].set()


def test_waiting_owners_are_served_in_turn_not_in_order_of_arrival(threads: Callable[..., threading.Thread]) -> None:
    share, model = ModelShare(slots=1, per_party=3), GatedModel()
    for text in ("a1", "a2", "a3", "v1"):
        model.prepare(text)
    threads(embed_as(share, model, "attacker", "a1"))
    assert model.calls["a1"].wait(WAIT_S)
    waiting = [threads(embed_as(share, model, "attacker", "a2"))]
    wait_until_waiting(share, 1)
    waiting.append(threads(embed_as(share, model, "attacker", "a3")))
    wait_until_waiting(share, 2)
    waiting.append(threads(embed_as(share, model, "victim", "v1")))
    wait_until_waiting(share, 3)
    for text in ("a1", "v1", "a2", "a3"):
        model.release[text].set()
    for thread in waiting:
        thread.join(WAIT_S)
    assert model.started == ["a1", "v1", "a2", "a3"]


def wait_until_waiting(share: ModelShare, turns: int) -> None:
    """Block until ``turns`` turns wait on ``share`` (woken by its condition, no sleep)."""
    with share._cond:
        assert share._cond.wait_for(lambda: sum(map(len, share._waiting.values())) == turns, WAIT_S)


def test_an_abandoned_request_s_embedding_that_has_not_started_is_never_computed(
    threads: Callable[..., threading.Thread],
) -> None:
    share, model = ModelShare(slots=1, per_party=2), GatedModel()
    for text in ("a1", "v1"):
        model.prepare(text)
    threads(embed_as(share, model, "attacker", "a1"))
    assert model.calls["a1"].wait(WAIT_S)
    claim = Claim()
    gone = threads(embed_as(share, model, "victim", "v1", claim))
    wait_until_waiting(share, 1)
    claim.abandon()
    gone.join(WAIT_S)
    assert [type(e) for e in gone.errors] == [Abandoned]  # type: ignore[attr-defined]
    model.release["a1"].set()
    assert model.started == ["a1"] and share.dropped == 1
    assert share.open_requests("victim") == 0


def test_an_embedder_passes_on_at_most_max_chars_of_a_text() -> None:
    model = GatedModel()
    BoundedEmbedder(model, ModelShare(), max_chars=100).embed_batch(["x" * 5000, "short"])
    assert model.texts == ["x" * 100, "short"]


def test_the_settings_bound_a_service_s_texts() -> None:
    embedder = build_embedder(
        ModelSettings(), EmbeddingSettings(base_url="http://127.0.0.1:9/v1", dims=8, max_chars=300)
    )
    assert isinstance(embedder, BoundedEmbedder) and embedder.max_chars == 300


def test_a_service_runs_more_embeddings_at_once_than_the_local_model() -> None:
    # A service's calls wait on the network, not on this process's cores: a
    # worker's extraction threads each call it twice a batch, and behind the
    # local model's two slots they queued (docs/benchmarks.md).
    service = EmbeddingSettings(base_url="http://127.0.0.1:9/v1", dims=8)
    embedder = build_embedder(ModelSettings(), service)
    assert isinstance(embedder, BoundedEmbedder) and embedder.share.slots == service.service_slots == 16
    assert model_share(service, ApiSettings()).slots == 16
    assert model_share(EmbeddingSettings(), ApiSettings()).slots == EmbeddingSettings().slots == 2
    assert model_share(EmbeddingSettings(base_url="http://127.0.0.1:9/v1", service_slots=3), ApiSettings()).slots == 3


@pytest.mark.parametrize("text", ["1 " * 16000, "hello world " * 3000, "我" * 5000])
def test_the_local_model_reads_one_window_of_a_long_text(text: str) -> None:
    model = _load(1)
    cut = fit_window(model, text, query=False)
    assert text.startswith(cut) and model.token_count(cut, False) <= WINDOW_TOKENS
    assert model.token_count(text[: len(cut) + 2], False) > WINDOW_TOKENS  # the longest that fits


def test_a_text_that_fits_the_window_is_embedded_as_it_is() -> None:
    model = _load(1)
    text = "我对花生过敏, and my son plays football on Thursdays."
    assert fit_window(model, text, query=True) == text
    embedder = LocalEmbedder()
    long = "1 " * 16000
    assert embedder.embed(long, "add") == embedder.embed(fit_window(model, long, query=False), "add")


def test_a_worker_job_s_embeddings_are_its_owner_s_turns() -> None:
    from dramatiq.brokers.stub import StubBroker
    from dramatiq.worker import Worker

    broker = StubBroker()
    broker.add_middleware(OwnerTurns())
    seen: list[str] = []

    @dramatiq.actor(broker=broker, max_retries=0)
    def job(payload: dict[str, str]) -> None:
        seen.append(current_party())

    worker = Worker(broker, worker_threads=1)
    worker.start()
    try:
        job.send({"owner_key": "a" * 64})
        job.send({"no_owner": "here"})
        broker.join(job.queue_name)
        worker.join()
    finally:
        worker.stop()
    assert seen == ["a" * 64, ANONYMOUS]
