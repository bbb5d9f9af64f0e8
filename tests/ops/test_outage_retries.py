"""The retry policy of outages (``OutageRetries``), on Dramatiq's stub broker:
an outage is retried on a time budget without counting against max_retries;
past the budget, and for any other failure, the count applies (server-free)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from memjobs_client.errors import BackendUnavailable
from memjobs_worker.jobs import DRAMATIQ_WORKER_LOGGER, OUTAGE_RETRIES_OPTION, OutageRetries, use_outage_retries
from memjobs_worker.settings import WorkerSettings


class Flaky:
    """Fails ``failures`` times with ``error``, then succeeds; counts the calls."""

    def __init__(self, failures: int, error: type[Exception]) -> None:
        self.failures, self.error = failures, error
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.calls += 1
            if self.calls <= self.failures:
                raise self.error("the backend did not answer")


@pytest.fixture
def broker_factory() -> Iterator[Callable[[int], StubBroker]]:
    made: list[tuple[StubBroker, dramatiq.Worker]] = []

    def make(budget_ms: int) -> StubBroker:
        broker = StubBroker()
        use_outage_retries(broker, WorkerSettings(outage_retry_budget_ms=budget_ms, outage_max_backoff_ms=10))
        worker = dramatiq.Worker(broker, worker_timeout=10)
        worker.start()
        made.append((broker, worker))
        return broker

    yield make
    for broker, worker in made:
        worker.stop()
        broker.close()


def run(broker: StubBroker, flaky: Flaky) -> None:
    actor = dramatiq.actor(  # type: ignore[call-overload]
        lambda: flaky(),
        broker=broker,
        actor_name="flaky",
        queue_name="flaky",
        max_retries=0,
        min_backoff=1,
        max_backoff=10,
    )
    actor.send()
    broker.join("flaky", timeout=20_000, fail_fast=False)


def test_the_broker_retries_outages_with_the_outage_policy(broker_factory: Callable[[int], StubBroker]) -> None:
    broker = broker_factory(60_000)
    assert sum(isinstance(m, OutageRetries) for m in broker.middleware) == 1
    assert not any(type(m) is dramatiq.middleware.Retries for m in broker.middleware)


def test_an_outage_within_the_budget_is_retried_past_max_retries(broker_factory: Callable[[int], StubBroker]) -> None:
    broker = broker_factory(60_000)
    flaky = Flaky(6, BackendUnavailable)
    run(broker, flaky)
    assert flaky.calls == 7  # six outage failures with max_retries=0, then success
    assert broker.dead_letters == []


def test_past_the_budget_the_count_applies(broker_factory: Callable[[int], StubBroker]) -> None:
    broker = broker_factory(0)
    flaky = Flaky(6, BackendUnavailable)
    run(broker, flaky)
    assert flaky.calls == 1
    [dead] = broker.dead_letters
    assert OUTAGE_RETRIES_OPTION not in dead.options


def test_any_other_failure_is_counted(broker_factory: Callable[[int], StubBroker]) -> None:
    broker = broker_factory(60_000)
    flaky = Flaky(6, ValueError)
    run(broker, flaky)
    assert flaky.calls == 1
    assert len(broker.dead_letters) == 1


def test_an_outage_is_one_warning_line_without_a_traceback_other_failures_keep_theirs(
    broker_factory: Callable[[int], StubBroker], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=DRAMATIQ_WORKER_LOGGER):
        run(broker_factory(60_000), Flaky(3, BackendUnavailable))
        run(broker_factory(60_000), Flaky(1, ValueError))
    failed = [
        r for r in caplog.records if r.name == DRAMATIQ_WORKER_LOGGER and r.getMessage().startswith("Failed to process")
    ]
    outages = [r for r in failed if "a backend is unreachable (BackendUnavailable)" in r.getMessage()]
    others = [r for r in failed if r not in outages]
    assert len(outages) == 3 and all(r.levelname == "WARNING" and r.exc_info is None for r in outages)
    [other] = others
    assert other.levelname == "ERROR" and other.exc_info is not None
