"""A stock Dramatiq no-op actor, for ``bench_load.py`` to run as a worker
process beside memjobs': ``dramatiq --path bench stock_noop``. Stock
``RedisBroker`` with its default middleware, in a namespace of its own on the
URL in ``STOCK_REDIS_URL``."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

NAMESPACE = "stock"
QUEUE = "noop"

broker = RedisBroker(url=os.environ.get("STOCK_REDIS_URL", "redis://127.0.0.1:6379/0"), namespace=NAMESPACE)  # type: ignore[no-untyped-call]  # dramatiq is unannotated
dramatiq.set_broker(broker)


@dramatiq.actor(broker=broker, queue_name=QUEUE, actor_name="stock_noop", max_retries=0)
def noop(payload: dict[str, object]) -> None:
    return None
