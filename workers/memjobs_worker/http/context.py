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
import contextvars
import gc
import logging
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import anyio.to_thread
import psycopg
import sqlalchemy.exc
from fastapi import Request

from memjobs_client.client import MemjobsClient
from memjobs_client.errors import MemjobsError
from memjobs_client.redis_seam import RedisError
from memjobs_worker.embedding.fair import Abandoned, Claim, ModelShare
from memjobs_worker.endpoints import Endpoints
from memjobs_worker.http.auth import Tokens
from memjobs_worker.http.metrics import ApiMetrics, CountEnqueued
from memjobs_worker.http.problems import ProblemError
from memjobs_worker.knowledge.citations import CitedChunk, read_cited
from memjobs_worker.knowledge.search import SearchOutcome, search_with
from memjobs_worker.lifecycle import EraseReport, Owner, erase_owner, export_lines, owner_parts
from memjobs_worker.memory.pipeline import RecallHit
from memjobs_worker.memory.service import PersonalMemory
from memjobs_worker.memory.store.base import StateStore
from memjobs_worker.model_breaker import BreakerState
from memjobs_worker.observability.retrying import stale_after_ms
from memjobs_worker.ops import status as ops_status
from memjobs_worker.runtime import open_door
from memjobs_worker.sessions.build import SessionStores
from memjobs_worker.settings import ApiSettings, Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The claim of the request a worker thread works for (set by :meth:`ApiContext.call`).
CLAIM: contextvars.ContextVar[Claim | None] = contextvars.ContextVar("memjobs_api_claim", default=None)

#: Threads that run blocking backend calls (Redis enqueues, database and mem0 reads).
BACKEND_THREADS = 8


class ApiParts(SessionStores, Protocol):
    """The stores the routes read, each built when first read (the process's
    :class:`~memjobs_worker.runtime.Runtime` is one): session end's, and the ledger."""

    @property
    def store(self) -> StateStore:
        """The ledger (the console's counts)."""
        ...


class ApiContext:
    """The collaborators of one API instance.

    Parameters:
        settings: read once by the entry point; every section, for the door's
            runtime (:func:`~memjobs_worker.runtime.open_door`). The routes see
            only what they read: :attr:`api`, :attr:`knowledge_on`, :attr:`stale_after_ms`.
        endpoints: where Redis and the state store are.
    """

    def __init__(self, settings: Settings, endpoints: Endpoints) -> None:
        self.api: ApiSettings = settings.api
        self.knowledge_on = settings.knowledge.enabled
        #: When a retrying job's worker counts as gone (the console's views).
        self.stale_after_ms = stale_after_ms(settings.workers)
        self.tokens = Tokens.from_settings(settings.api)
        self.metrics = ApiMetrics()
        self.timeout_s = settings.api.backend_timeout_ms / 1000
        # The producer client as every door builds it, its Redis calls bounded by the
        # backend timeout, and counting what it enqueues. mem0, once built, is moved
        # out of the collector's sight as the rest of the process is (see app.lifespan).
        runtime = open_door(
            settings,
            endpoints,
            on_engine_built=gc.freeze,
            redis_url=_with_timeouts(endpoints.redis_url, self.timeout_s),
            middleware=[CountEnqueued(self.metrics.enqueued)],
        )
        self._runtime = runtime  # to close it; the routes see only the parts below
        self.client: MemjobsClient = runtime.client
        self.memory: PersonalMemory = runtime.personal_memory
        self.parts: ApiParts = runtime  # the stores the routes read, each built on first read
        self.model_share: ModelShare = runtime.model_share
        # Every search (the route's and /mcp's) embeds as its owner's turn.
        # The store (hence the switch) before the embedder, as every door searches.
        self.search_knowledge: Callable[[str, str, int], SearchOutcome] = lambda owner, query, k: _as_party(
            self.model_share, owner, lambda: search_with(runtime.knowledge, runtime.knowledge_embedder, owner, query, k)
        )
        # /mcp/memory's recall: its owner's turn on the model share too (as /v1/recall's).
        self.recall_memories: Callable[[str, str, int], list[RecallHit]] = lambda owner, query, limit: _as_party(
            self.model_share, owner, partial(runtime.personal_memory.recall, owner, query, limit)
        )
        self.read_cited_chunk: Callable[[str, str], CitedChunk] = lambda owner, cited: read_cited(
            runtime.knowledge, owner, cited
        )
        # An owner's erasure and export (docs/data-lifecycle.md): an erasure waits for the
        # owner's running jobs half the backend timeout at most, so that it answers in time.
        wait_ms = min(settings.lifecycle.erase_wait_ms, settings.api.backend_timeout_ms // 2)
        self.erase_owner: Callable[[Owner], EraseReport] = lambda owner: erase_owner(
            owner,
            owner_parts(runtime, wait_ms=wait_ms),
            redis_client=runtime.redis,
            db=runtime.db,
            hold_ms=settings.lifecycle.erase_hold_ms,
        )
        self.export_owner: Callable[[Owner], list[str]] = lambda owner: list(export_lines(owner, owner_parts(runtime)))
        self.pings: tuple[Callable[[], Any], ...] = (lambda: runtime.redis.ping(), lambda: runtime.store.ping())
        #: The model services' circuit breakers, for /readyz.
        self.model_breakers: Callable[[], list[BreakerState]] = lambda: ops_status.model_breakers(runtime.redis)
        # Few backend threads: 32 threads fighting the event loop for the GIL made the
        # latency tail several times longer (measured by bench/bench_http.py); requests
        # beyond these wait on the loop, bounded by api_max_in_flight and the timeout.
        # Each lane bounds its threads, the work of abandoned requests included (_run).
        self.backend_lane = anyio.CapacityLimiter(min(BACKEND_THREADS, settings.api.max_in_flight))
        self.cpu_lane = anyio.CapacityLimiter(1)
        self._threads: set[asyncio.Future[Any]] = set()  # the calls whose thread may still run

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking backend call in a worker thread, bounded by the backend timeout.

        Raises:
            ProblemError: ``backend_unavailable`` on timeout; ``internal`` for an
                error that is not a memjobs error (logged by class name only).
            MemjobsError: as the call raised it (mapped to its problem type).
        """
        return await self._run(self.backend_lane, fn, *args, **kwargs)

    async def compute(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """:meth:`call` for CPU-bound Python work (redacting a transcript, checking a
        long text for credentials): on the process's one computing thread, so that such work never runs on the event
        loop and never fights it with more than one thread for the GIL. Work not
        started when its request is abandoned is dropped; work that checks
        :func:`ensure_wanted` between its parts stops there.

        Raises:
            ProblemError: as :meth:`call` does.
        """
        return await self._run(self.cpu_lane, fn, *args, **kwargs)

    async def _run(self, lane: anyio.CapacityLimiter, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        claim = Claim()
        work = partial(_unless_abandoned, claim, partial(fn, *args, **kwargs))
        # The thread is awaited in a future of its own, shielded: a timeout or a client
        # gone gives up the wait, never the thread's token in its lane, which the future
        # holds until the thread ends. So a lane never runs more threads than its tokens,
        # abandoned work included (anyio's abandon_on_cancel would hand the token back at
        # once while the thread ran on, and a hung backend would pile up threads).
        thread = asyncio.ensure_future(anyio.to_thread.run_sync(work, limiter=lane))
        self._threads.add(thread)
        thread.add_done_callback(self._threads.discard)
        try:
            with anyio.fail_after(self.timeout_s):
                return await asyncio.shield(thread)
        except TimeoutError:
            log.warning("backend call timed out", extra={"call": getattr(fn, "__name__", "call")})
            raise ProblemError("backend_unavailable", "the backend did not answer in time") from None
        except (MemjobsError, ProblemError):
            raise
        except (RedisError, sqlalchemy.exc.SQLAlchemyError, psycopg.Error, OSError) as exc:
            log.warning(
                "backend call failed", extra={"call": getattr(fn, "__name__", "call"), "error": type(exc).__name__}
            )
            raise ProblemError("backend_unavailable") from None
        except Exception as exc:
            log.error(
                "backend call failed", extra={"call": getattr(fn, "__name__", "call"), "error": type(exc).__name__}
            )
            raise ProblemError("internal") from None
        finally:
            # Answered, timed out or cancelled: work not started yet is dropped (its turn
            # in the lane comes and goes at once), and an embedding still waiting for its
            # turn gives the turn up (the thread itself cannot be stopped once it runs;
            # the embedder's window bounds what is left).
            claim.abandon()

    async def call_model(self, owner_key: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """:meth:`call` for work that embeds: its embeddings are the owner's turns on the
        process's model share (one running at a time per owner, the owners served in
        turn), and an owner with ``MEMJOBS_API_MODEL_PER_OWNER`` such requests open
        already is refused, that owner only.

        Raises:
            ModelBusy: (429 ``model_busy``) the owner's requests fill its share.
        """
        return await self.call(_as_party, self.model_share, owner_key, partial(fn, *args, **kwargs))

    def close(self) -> None:
        # Work still running in threads is abandoned: its requests are gone with the
        # loop, and what it does to the closed clients below ends in an error nobody reads.
        self._runtime.close()
        self.client.close()


def _unless_abandoned(claim: Claim, work: Callable[[], T]) -> T:
    """Run ``work`` with the claim in its context (a copy of the caller's, made by
    anyio), unless its request was abandoned while the work waited for a thread: then
    nothing runs."""
    if claim.abandoned:
        raise Abandoned()
    CLAIM.set(claim)
    return work()


def ensure_wanted() -> None:
    """Between the parts of long work in a worker thread: stop when its request is gone.

    Raises:
        Abandoned: the request this thread works for was answered, timed out or cancelled.
    """
    claim = CLAIM.get()
    if claim is not None and claim.abandoned:
        raise Abandoned()


def _as_party(share: ModelShare, owner_key: str, work: Callable[[], T]) -> T:
    """``work`` as ``owner_key``'s request on ``share`` (in a worker thread, under
    the claim :meth:`ApiContext.call` put in its context, if any)."""
    with share.party(owner_key, CLAIM.get()):
        return work()


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
