"""Dramatiq's Redis broker, with undecodable messages dead-lettered.

Dramatiq's Redis consumer raises on a message it cannot decode (bytes pushed
into a queue by hand, a foreign encoder): the consumer thread restarts, and the
messages it had prefetched stay unacknowledged until the worker dies. Here such
a message is found among this consumer's unacknowledged ids and moved to the
dead-letter queue, once, and consumption goes on.
"""

from __future__ import annotations

import logging
from typing import Any

from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.errors import DecodeError

log = logging.getLogger(__name__)


class _Consumer(_RedisConsumer):
    def __next__(self) -> Any:
        while True:
            try:
                return super().__next__()  # type: ignore[no-untyped-call]
            except DecodeError as exc:
                self._dead_letter(exc.data)

    def _dead_letter(self, data: bytes) -> None:
        broker = self.broker
        acks = f"{broker.namespace}:__acks__.{broker.broker_id}.{self.queue_name}"
        messages = f"{broker.namespace}:{self.queue_name}.msgs"
        for raw_id in broker.client.smembers(acks):
            if broker.client.hget(messages, raw_id) == data:
                message_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
                broker.do_nack(self.queue_name, message_id)
                log.warning("undecodable message dead-lettered",
                            extra={"queue": self.queue_name, "reason": "undecodable_message"})
                return
        log.warning("undecodable message dropped: not found among this consumer's messages",
                    extra={"queue": self.queue_name, "reason": "undecodable_message"})


class MemjobsRedisBroker(RedisBroker):
    """A RedisBroker whose consumers dead-letter what they cannot decode."""

    @property
    def consumer_class(self) -> type[_RedisConsumer]:
        return _Consumer
