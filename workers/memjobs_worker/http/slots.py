"""The guard's bookkeeping: slots by pool and by client, and refusals counted by class.

What a slot counts (docs/security.md, issue 31): a handler at work. A request
takes its slot once its body is read and gives it back when the application
has produced its reply (the ``http.response.start`` message), not when the
client has read it: a client that never reads holds its connection (bounded by
flow control and the write timeout), never a slot an honest request needs.

Two pools: ``api`` (``/v1`` and ``/mcp``, the token checked before any of it)
and ``public`` (what needs no token: ``/openapi.json``, the console and its
login), so an unauthenticated flood cannot take a ``/v1`` slot. One client
address holds at most ``max_per_client`` requests across both, from the moment
it is admitted (reading its body included) until its reply is produced.

Refusals under load are a counter (``memjobs_api_refused_total{reason}``) and
at most one log line per reason per :data:`LOG_EVERY_S`, never a line (or a
traceback) per request.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable

from prometheus_client import Counter

log = logging.getLogger("memjobs.api")

#: Seconds between two log lines of one refusal reason.
LOG_EVERY_S = 10.0
#: The key, in the ASGI scope's ``state``, of the reason the guard refused a request
#: (the access log then leaves the request to the count).
REFUSED = "memjobs_refused"
API_POOL = "api"
PUBLIC_POOL = "public"


class RefusalLog:
    """Refusals by reason: a counter each time, a log line at most every ``every_s``
    per reason, saying how many there were since the last line.

    Parameters:
        counter: ``memjobs_api_refused_total`` (label ``reason``), or None.
        every_s: seconds between two lines of one reason.
        clock: monotonic seconds (a test passes its own).
    """

    def __init__(
        self, counter: Counter | None = None, every_s: float = LOG_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.counter = counter
        self.every_s = every_s
        self.clock = clock
        self._unlogged: defaultdict[str, int] = defaultdict(int)
        self._logged_at: dict[str, float] = {}

    def note(self, reason: str) -> None:
        if self.counter is not None:
            self.counter.labels(reason).inc()
        self._unlogged[reason] += 1
        now = self.clock()
        last = self._logged_at.get(reason)
        if last is None or now - last >= self.every_s:
            log.warning("requests refused", extra={"reason": reason, "count": self._unlogged.pop(reason)})
            self._logged_at[reason] = now


class Slots:
    """Slots by pool and requests open by client address (see the module docstring).

    Parameters:
        pools: the size of each pool, by name.
        max_per_client: requests one client address may have open at once.
    """

    def __init__(self, pools: dict[str, int], max_per_client: int) -> None:
        self.size = dict(pools)
        self.busy = dict.fromkeys(pools, 0)
        self.max_per_client = max_per_client
        self.by_client: defaultdict[str, int] = defaultdict(int)

    def admit_client(self, client: str) -> bool:
        """Count one more open request of ``client``; False (nothing counted) at the cap."""
        if self.by_client[client] >= self.max_per_client:
            if not self.by_client[client]:
                del self.by_client[client]
            return False
        self.by_client[client] += 1
        return True

    def release_client(self, client: str) -> None:
        self.by_client[client] -= 1
        if self.by_client[client] <= 0:
            del self.by_client[client]

    def take(self, pool: str) -> bool:
        """Take a slot of ``pool``; False when it is full."""
        if self.busy[pool] >= self.size[pool]:
            return False
        self.busy[pool] += 1
        return True

    def give_back(self, pool: str) -> None:
        self.busy[pool] -= 1

    @property
    def idle(self) -> bool:
        """No slot taken and no client counted (what a test checks after the storm)."""
        return not any(self.busy.values()) and not self.by_client
