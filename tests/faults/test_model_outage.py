"""A model outage under load is an outage (issue 30, item 2): with
``max_retries=1``, a chat model that answers 500, or refuses connections, for a
while dead-letters nothing, is called at most at the breaker's probe rate once
its breaker is open, never has more than one extraction queued per owner (the
sweeper runs throughout), and every source is learned exactly once after it
returns.

The outage lasts for events, not for a time: until the breaker is open and a
number of probes have been made, with a sweep after each. Its calls are counted
(the stand-in's recorded requests; with the server stopped, the worker's call
counter) and held to a bound computed from the outage's own length, an upper
bound a slow machine only stays further under.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from dramatiq import Message
from dramatiq.common import dq_name

from memjobs_client import keys
from memjobs_client.contracts import ACTOR_EXTRACT, QUEUE_OF, owner_key
from memjobs_worker.model_breaker import read_states
from memjobs_worker.observability.metrics import MODEL_CALLS
from tests.faults.test_faults import assert_learned_exactly_once
from tests.support.harness import Harness, HarnessFactory, MakeSettings
from tests.support.joblog import JobLog
from tests.support.ledger import remember_now
from tests.support.openai_server import FakeOpenAI, echo_facts_handler
from tests.support.polling import wait_for
from tests.support.redis_values import as_bytes

pytestmark = pytest.mark.fault

OWNERS = [owner_key(f"owner-{i}@example.com") for i in range(8)]
THREADS = 4
PROBES = 6  # probes made while the model is down (a sweep after each)
PROBE_INTERVAL_MS = 500
FAILURES_TO_OPEN = 3
EXTRACT_QUEUE = QUEUE_OF[ACTOR_EXTRACT]


def extractions_per_owner(h: Harness) -> Counter[str]:
    """Every extract_facts message Redis holds (ready, delayed or in flight), by owner.

    By message id: a retry or a delayed message coming due is the same message,
    held in both queues' hashes for a moment (added to one before the other acks it)."""
    client = h.runtime.redis
    owners: dict[str, str] = {}
    for queue in (EXTRACT_QUEUE, dq_name(EXTRACT_QUEUE)):
        for raw in client.hvals(keys.messages(queue)):
            message = Message.decode(as_bytes(raw))
            owners[message.message_id] = message.args[0]["owner_key"]
    return Counter(owners.values())


def chat_calls(outcome: str) -> float:
    """The in-process worker's chat calls so far with ``outcome`` (a process-wide counter)."""
    calls: float = MODEL_CALLS.labels("extract", outcome)._value.get()  # noqa: SLF001
    return calls


def breaker_open(h: Harness) -> bool:
    return {b.service: b.is_open for b in read_states(h.runtime.redis)}["chat"]


@pytest.mark.parametrize("fault", ["http_500", "refused"])
def test_a_model_outage_dead_letters_nothing_and_calls_at_the_probe_rate(
    fault: str, model_settings: MakeSettings, harness_factory: HarnessFactory, fake_model: FakeOpenAI, job_log: JobLog
) -> None:
    fake_model.set_chat_handler(echo_facts_handler)
    h = harness_factory(
        model_settings(
            max_retries=1,
            model_max_attempts=2,
            outage_max_backoff_ms=300,
            model_breaker_failures=FAILURES_TO_OPEN,
            model_breaker_probe_interval_ms=PROBE_INTERVAL_MS,
        )
    )
    port = int(fake_model.base_url.rsplit(":", 1)[1].split("/")[0])
    texts = {key: [f"{key[:6]} likes green tea", f"{key[:6]} 住在杭州"] for key in OWNERS}

    if fault == "http_500":
        fake_model.fail_next("chat", 500, count=1_000_000)

        def calls() -> float:
            return len(fake_model.requests_for("chat"))
    else:
        fake_model.stop()  # connection refused

        def calls() -> float:
            return chat_calls("connection_error")

    before = calls()
    ids = {key: [remember_now(h, key, t) for t in owned] for key, owned in texts.items()}
    h.start_worker(threads=THREADS)
    started = time.monotonic()  # no call was made before the workers started

    wait_for(lambda: breaker_open(h), 30, "the chat breaker to open")
    at_open = calls()
    for i in range(1, PROBES + 1):
        wait_for(lambda i=i: calls() >= at_open + i, 30, f"probe {i}")  # type: ignore[misc]  # python/mypy#15459
        h.runtime.sweeper.once()  # skips every owner: each has its one extraction retrying
        per_owner = extractions_per_owner(h)
        assert max(per_owner.values(), default=0) <= 1, per_owner
    ended = time.monotonic()
    during = calls() - before
    # A run that began an attempt made a call, or passed the gate as a probe came
    # free and lost it to another (at most one per thread per probe): the rest
    # were delayed before taking the lease.
    started_runs = sum(1 for key in OWNERS for e in h.store.attempt_events(key))
    if fault == "http_500":
        fake_model.clear_faults("chat")
    else:
        fake_model.start(port)  # the same address

    h.drain(120)
    drained_s = time.monotonic() - ended
    for key in OWNERS:
        assert_learned_exactly_once(h, ids[key], key)
    assert all(q["dead"] == 0 for q in h.queues().values()), h.queues()
    assert not [r for r in job_log.failures(ACTOR_EXTRACT) if getattr(r, "outcome", None) == "dead_lettered"]
    assert {getattr(r, "retries", None) for r in job_log.failures(ACTOR_EXTRACT)} <= {0}
    assert not breaker_open(h)

    # Before it opened: the failures that open it, and what was in flight then (each
    # thread's call and its one in-call retry); after: one probe per interval.
    bound = FAILURES_TO_OPEN + THREADS * 2 + (ended - started) / (PROBE_INTERVAL_MS / 1000) + 1
    print(
        json.dumps(
            {
                "fault": fault,
                "outage_s": round(ended - started, 2),
                "calls": during,
                "bound": round(bound, 1),
                "attempts_begun": started_runs,
                "final_after_s": round(drained_s, 2),
            }
        )
    )
    assert during <= bound, f"{during} calls in a {ended - started:.1f} s outage (bound {bound:.1f})"
    # Without the gate every retry of every owner began one (67 here, against 18).
    most = during + THREADS * (PROBES + 1)
    assert started_runs <= most, f"{started_runs} attempts begun for {during} calls (at most {most})"
