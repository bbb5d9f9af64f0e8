"""What every route needs: settings, the producer client, the services it
calls, tokens, metrics, and :meth:`ApiContext.call`, the one way a route
reaches a backend.

The context is built once, from the parts of the API's
:class:`~memjobs_worker.runtime.Runtime` (the composition root, which only
this module sees): enqueueing and forgetting go through the producer client
(:class:`~memjobs_client.MemjobsClient`, as every producer builds it, deciding
forgets on the ledger: :func:`~memjobs_worker.runtime.open_door`), the
owner's memory through :class:`~memjobs_worker.memory.service.PersonalMemory`,
the same objects the CLI calls. The parts that cost something to build (mem0,
the knowledge tables, the Markdown memory provider) are still built on first
use: the context holds functions that return them.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import redis
import sqlalchemy.exc
from fastapi import Request

from memjobs_client.client import MemjobsClient
from memjobs_client.errors import MemjobsError
from memjobs_worker.endpoints import Endpoints
from memjobs_worker.http.auth import Tokens
from memjobs_worker.http.metrics import ApiMetrics, CountEnqueued
from memjobs_worker.http.problems import ProblemError
from memjobs_worker.knowledge.citations import CitedChunk, read_cited
from memjobs_worker.knowledge.search import SearchOutcome
from memjobs_worker.memory.service import PersonalMemory
from memjobs_worker.memory.store.base import StateStore
from memjobs_worker.model_breaker import BreakerState
from memjobs_worker.ops import status as ops_status
from memjobs_worker.runtime import open_door
from memjobs_worker.sessions.memory_docs import AuditTrail, MemoryService
from memjobs_worker.sessions.store import SessionStore
from memjobs_worker.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Threads that run blocking backend calls (Redis enqueues, database and mem0 reads).
BACKEND_THREADS = 8


class ApiContext:
    """The collaborators of one API instance.

    Parameters:
        settings: read once by the entry point.
        endpoints: where Redis and the state store are.
    """

    def __init__(self, settings: Settings, endpoints: Endpoints) -> None:
        self.settings = settings
        self.tokens = Tokens.from_settings(settings)
        self.metrics = ApiMetrics()
        self.timeout_s = settings.api_backend_timeout_ms / 1000
        # The producer client as every door builds it, its Redis calls bounded by the
        # backend timeout, and counting what it enqueues. mem0, once built, is moved
        # out of the collector's sight as the rest of the process is (see app.lifespan).
        runtime = open_door(settings, endpoints, on_engine_built=gc.freeze,
                            redis_url=_with_timeouts(endpoints.redis_url, self.timeout_s))
        runtime.client.broker.add_middleware(CountEnqueued(self.metrics.enqueued))
        self._runtime = runtime  # to close it; the routes see only the parts below
        self.client: MemjobsClient = runtime.client
        self.memory: PersonalMemory = runtime.personal_memory
        self.memory_docs: Callable[[], MemoryService] = lambda: runtime.memory_docs
        self.memory_audit: Callable[[], AuditTrail] = lambda: runtime.audit
        self.sessions: Callable[[], SessionStore] = lambda: runtime.sessions
        self.search_knowledge: Callable[[str, str, int], SearchOutcome] = runtime.search_knowledge
        self.read_cited_chunk: Callable[[str, str], CitedChunk] = (
            lambda owner, cited: read_cited(runtime.knowledge, owner, cited))
        self.ledger: Callable[[], StateStore] = lambda: runtime.store  # counts for the console
        self.pings: tuple[Callable[[], Any], ...] = (lambda: runtime.redis.ping(),
                                                     lambda: runtime.store.ping())
        #: The model services' circuit breakers, for /readyz.
        self.model_breakers: Callable[[], list[BreakerState]] = lambda: ops_status.model_breakers(runtime.redis)
        # Few backend threads: 32 threads fighting the event loop for the GIL made the
        # latency tail several times longer (measured by bench/bench_http.py); requests
        # beyond these wait on the loop, bounded by api_max_in_flight and the timeout.
        self.executor = ThreadPoolExecutor(min(BACKEND_THREADS, settings.api_max_in_flight),
                                           thread_name_prefix="memjobs-api-backend")

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking backend call in a worker thread, bounded by the backend timeout.

        Raises:
            ProblemError: ``backend_unavailable`` on timeout; ``internal`` for an
                error that is not a memjobs error (logged by class name only).
            MemjobsError: as the call raised it (mapped to its problem type).
        """
        work = partial(fn, *args, **kwargs)
        try:
            async with asyncio.timeout(self.timeout_s):
                # On timeout the await is abandoned; the thread finishes (or times out) on its own.
                result = await asyncio.get_running_loop().run_in_executor(self.executor, work)
            return result
        except TimeoutError:
            log.warning("backend call timed out", extra={"call": getattr(fn, "__name__", "call")})
            raise ProblemError("backend_unavailable", "the backend did not answer in time") from None
        except (MemjobsError, ProblemError):
            raise
        except (redis.RedisError, sqlalchemy.exc.SQLAlchemyError, psycopg.Error, OSError) as exc:
            log.warning("backend call failed", extra={"call": getattr(fn, "__name__", "call"),
                                                      "error": type(exc).__name__})
            raise ProblemError("backend_unavailable") from None
        except Exception as exc:
            log.error("backend call failed", extra={"call": getattr(fn, "__name__", "call"),
                                                    "error": type(exc).__name__})
            raise ProblemError("internal") from None

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self._runtime.close()
        self.client.close()


def _with_timeouts(redis_url: str, seconds: float) -> str:
    """``redis_url`` with socket timeouts as query parameters (redis-py reads them there)."""
    parts = urlsplit(redis_url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("socket_timeout", "socket_connect_timeout")]
    query += [("socket_timeout", f"{seconds:g}"), ("socket_connect_timeout", f"{min(5.0, seconds):g}")]
    return urlunsplit(parts._replace(query=urlencode(query)))


async def ctx(request: Request) -> ApiContext:
    """Dependency: the API's context."""
    context: ApiContext = request.app.state.ctx
    return context
