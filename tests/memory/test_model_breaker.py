"""The model circuit breaker's policy, on both breakers (Redis, and the twin on
a clock the test moves), and the model client behind it: a refused attempt
makes no request, a 4xx is not an outage."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from memjobs_client import keys
from memjobs_client.errors import ModelUnavailable
from memjobs_worker.db.outage import is_outage
from memjobs_worker.model_breaker import (
    InMemoryModelBreaker,
    ModelBreaker,
    RedisModelBreaker,
    Ticket,
    read_states,
)
from memjobs_worker.model_client import ChatModel
from tests.support.clocks import ManualClock
from tests.support.openai_server import FakeOpenAI

LIMITS = {"failures": 3, "failure_window_ms": 120_000, "probe_interval_ms": 60_000}


@pytest.fixture(params=["redis", "twin"])
def breaker(request: pytest.FixtureRequest) -> Iterator[ModelBreaker]:
    if request.param == "redis":
        client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
        yield RedisModelBreaker(client, "chat", **LIMITS)
        client.close()
    else:
        yield InMemoryModelBreaker("chat", monotonic=ManualClock().monotonic, **LIMITS)


def test_the_breaker_opens_after_its_failures_and_then_refuses_all_but_one_probe(breaker: ModelBreaker) -> None:
    for _ in range(LIMITS["failures"] - 1):
        assert breaker.admit() is Ticket.CLOSED
        breaker.failed(Ticket.CLOSED)
    assert breaker.admit() is Ticket.CLOSED  # one short of the threshold
    breaker.failed(Ticket.CLOSED)
    assert [breaker.admit() for _ in range(5)] == [Ticket.PROBE] + [Ticket.REFUSED] * 4


def test_a_failed_probe_keeps_it_open_and_a_successful_one_closes_it(breaker: ModelBreaker) -> None:
    for _ in range(LIMITS["failures"]):
        breaker.failed(Ticket.CLOSED)
    probe = breaker.admit()
    assert probe is Ticket.PROBE
    breaker.failed(probe)
    assert breaker.admit() is Ticket.REFUSED
    breaker.succeeded(Ticket.CLOSED)  # a success that was not the probe says nothing
    assert breaker.admit() is Ticket.REFUSED
    breaker.succeeded(probe)
    assert breaker.admit() is Ticket.CLOSED


def test_probes_come_at_most_once_per_interval() -> None:
    clock = ManualClock()
    breaker = InMemoryModelBreaker("chat", monotonic=clock.monotonic, **LIMITS)
    for _ in range(LIMITS["failures"]):
        breaker.failed(Ticket.CLOSED)
    assert breaker.admit() is Ticket.PROBE
    clock.advance(seconds=LIMITS["probe_interval_ms"] / 1000 - 0.001)
    assert breaker.admit() is Ticket.REFUSED
    clock.advance(seconds=0.001)
    assert breaker.admit() is Ticket.PROBE


def test_failures_outside_the_window_do_not_open_it() -> None:
    clock = ManualClock()
    breaker = InMemoryModelBreaker("chat", monotonic=clock.monotonic, **LIMITS)
    for _ in range(LIMITS["failures"] - 1):
        breaker.failed(Ticket.CLOSED)
    clock.advance(seconds=LIMITS["failure_window_ms"] / 1000)
    breaker.failed(Ticket.CLOSED)
    assert breaker.admit() is Ticket.CLOSED
    assert breaker.state().failures == 1


def test_operators_read_the_state_redis_keeps(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    breaker = RedisModelBreaker(client, "embed", **LIMITS)
    assert {s.service: s.state for s in read_states(client)} == {"chat": "closed", "embed": "closed"}
    for _ in range(LIMITS["failures"]):
        breaker.failed(Ticket.CLOSED)
    states = {s.service: s for s in read_states(client)}
    assert states["embed"].is_open and states["embed"].open_for_s is not None
    assert not states["chat"].is_open
    client.close()


def chat(fake: FakeOpenAI, breaker: ModelBreaker, calls: list[str]) -> ChatModel:
    hook: Callable[[str, str, float], None] = lambda _p, outcome, _s: calls.append(outcome)  # noqa: E731
    return ChatModel(
        model="fake",
        base_url=fake.base_url,
        api_key="k",
        timeout_ms=5_000,
        max_attempts=3,
        on_call=hook,
        breaker=breaker,
    )


def test_an_open_breaker_refuses_without_a_request_as_an_outage(fake_model: FakeOpenAI) -> None:
    breaker = InMemoryModelBreaker("chat", monotonic=ManualClock().monotonic, **LIMITS)
    calls: list[str] = []
    model = chat(fake_model, breaker, calls)
    fake_model.fail_next("chat", 500, count=100)
    with pytest.raises(ModelUnavailable) as first:
        model.generate_response([{"role": "user", "content": "hi"}])
    assert first.value.reason == "model_unavailable" and is_outage(first.value)
    # 3 failures opened it: the next call's first attempt is the one probe (it
    # fails), its second is refused without a request, as is a third call.
    for _ in range(2):
        with pytest.raises(ModelUnavailable) as refused:
            model.generate_response([{"role": "user", "content": "hi"}])
        assert refused.value.reason == "model_circuit_open" and is_outage(refused.value)
    assert len(fake_model.requests_for("chat")) == LIMITS["failures"] + 1
    assert calls == ["server_error"] * 4 + ["circuit_open"] * 2


def test_a_rejected_request_is_not_an_outage_and_does_not_open_the_breaker(fake_model: FakeOpenAI) -> None:
    breaker = InMemoryModelBreaker("chat", monotonic=ManualClock().monotonic, **LIMITS)
    model = chat(fake_model, breaker, [])
    for _ in range(LIMITS["failures"] + 1):
        fake_model.fail_next("chat", 401)
        with pytest.raises(ModelUnavailable) as rejected:
            model.generate_response([{"role": "user", "content": "hi"}])
        assert rejected.value.reason == ModelUnavailable.REJECTED and not is_outage(rejected.value)
    assert breaker.admit() is Ticket.CLOSED


def test_waiting_says_a_call_would_be_refused_without_taking_the_probe(breaker: ModelBreaker) -> None:
    assert not breaker.waiting()
    for _ in range(LIMITS["failures"]):
        breaker.failed(Ticket.CLOSED)
    assert not breaker.waiting()  # open, but the probe is free: a call now would probe
    assert not breaker.waiting()  # (asking took nothing)
    assert breaker.admit() is Ticket.PROBE
    assert breaker.waiting()


def test_an_open_breaker_no_failure_keeps_open_for_a_window_closes_by_itself() -> None:
    clock = ManualClock()
    breaker = InMemoryModelBreaker("chat", monotonic=clock.monotonic, **LIMITS)
    for _ in range(LIMITS["failures"]):
        breaker.failed(Ticket.CLOSED)
    clock.advance(seconds=LIMITS["failure_window_ms"] / 1000 - 1)
    probe = breaker.admit()
    breaker.failed(probe)  # a failed probe keeps it open a window more
    clock.advance(seconds=LIMITS["failure_window_ms"] / 1000 - 1)
    assert breaker.state().is_open
    clock.advance(seconds=1)  # nobody called for a window: the jobs are gone
    assert not breaker.state().is_open and breaker.admit() is Ticket.CLOSED


def test_on_redis_the_open_key_lives_a_window_past_the_last_failure(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    breaker = RedisModelBreaker(client, "chat", **LIMITS)
    for _ in range(LIMITS["failures"]):
        breaker.failed(Ticket.CLOSED)
    names = keys.model_breaker("chat")
    assert 0 < int(client.pttl(names.open)) <= LIMITS["failure_window_ms"]
    client.pexpire(names.open, 50)  # most of the window gone; a failed probe renews it
    breaker.failed(breaker.admit())
    assert int(client.pttl(names.open)) > LIMITS["failure_window_ms"] / 2
    client.close()
