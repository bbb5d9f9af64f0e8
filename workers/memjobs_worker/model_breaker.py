"""The model circuit breaker: one per model service, shared by every host.

A model service that is down (connection refused, timeouts, 429, 5xx) is an
outage, not the job's fault (:func:`memjobs_worker.db.outage.is_outage`): the
job is retried on the outage time budget. Without a breaker each of those
retries still calls the dead endpoint, on every host, ``model_max_attempts``
times (issue 30: 3,107 calls in a 338 s outage). With it:

- **closed**: calls go through. Each outage failure is counted, across hosts,
  in a window of ``failure_window_ms``; ``failures`` of them open the breaker.
- **open**: no call is made; :meth:`ModelBreaker.admit` refuses and the client
  raises ``ModelUnavailable`` (reason ``model_circuit_open``) at once, so the
  job is delayed by the outage retries without touching the endpoint.
  Except one caller in each ``probe_interval_ms``, across every host (a
  ``SET NX PX`` token): its call is the *probe* (the half-open state).
- the probe's success closes the breaker; its failure leaves it open (the next
  probe is one interval later). An open breaker that sees no failure for
  ``failure_window_ms`` (nobody called: the jobs that needed the model were
  dead-lettered or are done) closes by itself, so an idle system does not
  stay "degraded" after the service is back.

A job that needs the model can ask :meth:`ModelBreaker.waiting` before it does
any work (the extraction does, before it takes the owner's lease): while the
breaker is open and its probe taken, it is delayed at once.

So during an outage the service sees at most ``failures`` calls (and those in
flight when it opened), then one every ``probe_interval_ms``. A success while
closed costs nothing but the one round trip of :meth:`admit`.

The breaker is advisory: if Redis does not answer, calls go through (the job
then fails on Redis anyway, as an outage). Its keys (:mod:`memjobs_client.keys`)
name the service (``chat``, ``embed``), never an owner.

Seam: :class:`ModelBreaker`, with :class:`RedisModelBreaker` (production) and
:class:`InMemoryModelBreaker` (its twin: one process, a clock a test moves);
:func:`read_states` is what the operator views read.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import redis

from memjobs_client import keys
from memjobs_client.redis_seam import redis_best_effort
from memjobs_worker.settings import ModelSettings

#: The services a breaker guards: the light chat model and the embedding service.
SERVICES = ("chat", "embed")

Monotonic = Callable[[], float]


class Ticket(Enum):
    """What :meth:`ModelBreaker.admit` answered."""

    CLOSED = "closed"  # call: the breaker is closed
    PROBE = "probe"  # call: the breaker is open and this call is its probe
    REFUSED = "refused"  # do not call: open, and another probe is recent


@dataclass(frozen=True)
class BreakerState:
    """One breaker as operators see it.

    ``state``: ``closed`` or ``open``; ``failures``: outage failures counted in the
    current window; ``open_for_s``: seconds since it opened (None: closed).
    """

    service: str
    state: str
    failures: int
    open_for_s: float | None

    @property
    def is_open(self) -> bool:
        return self.state == "open"


class ModelBreaker(ABC):
    """The breaker of one model service.

    Parameters:
        service: ``chat`` or ``embed`` (a key part and a metric label).
        failures: outage failures within ``failure_window_ms`` that open it.
        failure_window_ms: how long a counted failure is remembered.
        probe_interval_ms: at most one probe per this many ms, across hosts.
    """

    def __init__(self, service: str, *, failures: int, failure_window_ms: int, probe_interval_ms: int) -> None:
        self.service = service
        self.failures = failures
        self.failure_window_ms = failure_window_ms
        self.probe_interval_ms = probe_interval_ms

    @abstractmethod
    def admit(self) -> Ticket:
        """Whether to call now: closed, the probe, or refused (never raises)."""

    @abstractmethod
    def waiting(self) -> bool:
        """Whether a call now would surely be refused (open, and its probe taken
        within the interval), without taking anything: a job that needs the
        model asks first and is delayed before it does any work (never raises)."""

    @abstractmethod
    def failed(self, ticket: Ticket) -> None:
        """A call admitted with ``ticket`` failed on an outage: count it (never raises)."""

    @abstractmethod
    def succeeded(self, ticket: Ticket) -> None:
        """A call admitted with ``ticket`` succeeded: a probe's success closes the
        breaker (never raises)."""


# Redis ---------------------------------------------------------------------------

#: KEYS: open, probe. ARGV: probe interval ms. → 0 closed, 1 probe, 2 refused.
_ADMIT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return 1 end
return 2
"""
#: KEYS: failures, open. ARGV: window ms, threshold, now ms. → the count.
#: The open key lives a window past the last failure (see :class:`ModelBreaker`).
_FAILED = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
if redis.call('PEXPIRE', KEYS[2], ARGV[1]) == 0 and n >= tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[1])
end
return n
"""
_TICKETS = {0: Ticket.CLOSED, 1: Ticket.PROBE, 2: Ticket.REFUSED}


class RedisModelBreaker(ModelBreaker):
    """The breaker kept in Redis, shared by every host (see the module docstring)."""

    def __init__(self, client: redis.Redis, service: str, **limits: Any) -> None:
        super().__init__(service, **limits)
        self.redis = client
        self._admit = client.register_script(_ADMIT)
        self._failed = client.register_script(_FAILED)
        self._keys = keys.model_breaker(service)

    def admit(self) -> Ticket:
        with redis_best_effort() as attempt:
            answer = self._admit(keys=[self._keys.open, self._keys.probe], args=[self.probe_interval_ms])
        if attempt.failed:
            return Ticket.CLOSED  # advisory: Redis away is an outage of its own
        return _TICKETS.get(int(answer), Ticket.CLOSED)

    def waiting(self) -> bool:
        with redis_best_effort():
            return int(self.redis.exists(self._keys.open, self._keys.probe)) == 2
        return False

    def failed(self, ticket: Ticket) -> None:
        with redis_best_effort():
            self._failed(
                keys=[self._keys.failures, self._keys.open],
                args=[self.failure_window_ms, self.failures, int(time.time() * 1000)],
            )

    def succeeded(self, ticket: Ticket) -> None:
        if ticket is not Ticket.PROBE:
            return
        with redis_best_effort():  # the next probe closes it
            self.redis.delete(self._keys.open, self._keys.failures)


def breakers(model: ModelSettings, client: redis.Redis) -> dict[str, ModelBreaker]:
    """The breaker of each service (:data:`SERVICES`), on ``client``, with the
    settings' thresholds (``MEMJOBS_MODEL_BREAKER_*``)."""
    limits = {
        "failures": model.breaker_failures,
        "failure_window_ms": model.breaker_window_ms,
        "probe_interval_ms": model.breaker_probe_interval_ms,
    }
    return {service: RedisModelBreaker(client, service, **limits) for service in SERVICES}


def read_states(client: redis.Redis) -> list[BreakerState]:
    """Every service's breaker, as stored in Redis (one round trip).

    Raises:
        redis.RedisError: Redis did not answer (the callers translate it).
    """
    pipe = client.pipeline(transaction=False)
    for service in SERVICES:
        names = keys.model_breaker(service)
        pipe.get(names.open)
        pipe.get(names.failures)
    values = pipe.execute()
    now_ms = time.time() * 1000
    states = []
    for i, service in enumerate(SERVICES):
        opened, failures = values[2 * i], values[2 * i + 1]
        open_for = max(0.0, (now_ms - float(opened)) / 1000) if opened is not None else None
        states.append(BreakerState(service, "open" if opened is not None else "closed", int(failures or 0), open_for))
    return states


# The twin -------------------------------------------------------------------------


class InMemoryModelBreaker(ModelBreaker):
    """The breaker's twin: one process, on a clock a test moves (seconds)."""

    def __init__(self, service: str, *, monotonic: Monotonic = time.monotonic, **limits: Any) -> None:
        super().__init__(service, **limits)
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._failures: list[float] = []
        self._opened_at: float | None = None
        self._last_failure = float("-inf")
        self._probe_until = float("-inf")

    def _expire(self, now: float) -> None:
        """Close an open breaker no failure has kept open for a window (the key's PX)."""
        if self._opened_at is not None and self._last_failure + self.failure_window_ms / 1000 <= now:
            self._opened_at = None

    def admit(self) -> Ticket:
        with self._lock:
            now = self.monotonic()
            self._expire(now)
            if self._opened_at is None:
                return Ticket.CLOSED
            if now < self._probe_until:
                return Ticket.REFUSED
            self._probe_until = now + self.probe_interval_ms / 1000
            return Ticket.PROBE

    def waiting(self) -> bool:
        with self._lock:
            now = self.monotonic()
            self._expire(now)
            return self._opened_at is not None and now < self._probe_until

    def failed(self, ticket: Ticket) -> None:
        with self._lock:
            now = self.monotonic()
            if not self._failures or self._failures[0] + self.failure_window_ms / 1000 <= now:
                self._failures = []  # the window starts at its first failure, as PEXPIRE does
            self._failures.append(now)
            self._expire(now)
            self._last_failure = now
            if len(self._failures) >= self.failures and self._opened_at is None:
                self._opened_at = now

    def succeeded(self, ticket: Ticket) -> None:
        if ticket is Ticket.PROBE:
            with self._lock:
                self._opened_at = None
                self._failures = []

    def state(self) -> BreakerState:
        with self._lock:
            self._expire(self.monotonic())
            opened = self._opened_at
            return BreakerState(
                self.service,
                "closed" if opened is None else "open",
                len(self._failures),
                None if opened is None else self.monotonic() - opened,
            )
