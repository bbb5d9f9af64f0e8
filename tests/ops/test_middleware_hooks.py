"""The broker calls, on each signal, only the middlewares that do something on
it (Dramatiq calls all fifteen four times a job), in Dramatiq's order, and
sees a middleware added after the first job."""

from __future__ import annotations

from typing import Any

import dramatiq
import redis
from dramatiq.broker import MessageProxy
from dramatiq.middleware import Middleware

from memjobs_worker.broker import MemjobsRedisBroker
from memjobs_worker.observability.message import JobMiddleware


class Quiet(Middleware):
    """Every hook the base class's no-op."""


class QuietJob(JobMiddleware):
    """``after_process_message`` calls ``job_processed``, which does nothing."""


class Heard(JobMiddleware):
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        self.calls.append(f"before {self.name}")

    def job_processed(self, broker: dramatiq.Broker, message: MessageProxy, exception: BaseException | None) -> None:
        self.calls.append(f"after {self.name}")


class Failing(Middleware):
    def after_process_message(self, broker: dramatiq.Broker, message: MessageProxy, **kwargs: Any) -> None:
        raise RuntimeError("a middleware's bug is logged, not raised")


def test_only_the_middlewares_that_do_something_are_called_in_dramatiqs_order(redis_url: str) -> None:
    calls: list[str] = []
    broker = MemjobsRedisBroker(client=redis.Redis.from_url(redis_url), middleware=[])
    for middleware in (Quiet(), Heard("a", calls), QuietJob(), Failing(), Heard("b", calls)):
        broker.add_middleware(middleware)
    message: dramatiq.Message[Any] = dramatiq.Message(queue_name="q", actor_name="x", args=(), kwargs={}, options={})
    broker.emit_before("process_message", message)
    broker.emit_after("process_message", message, result=None)
    assert calls == ["before a", "before b", "after b", "after a"]
    assert [type(m).__name__ for m in broker._hooks("after_process_message", reverse=True)] == [
        "Heard",
        "Failing",
        "Heard",
    ]
    assert broker._hooks("before_ack", reverse=False) == []

    # A middleware added later is called from the next signal on.
    calls.clear()
    broker.add_middleware(Heard("c", calls))
    broker.emit_before("process_message", message)
    assert calls == ["before a", "before b", "before c"]
