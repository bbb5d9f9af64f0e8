"""Operations: ``/healthz`` (the process is up), ``/readyz`` (Redis and the state
store answer; the model services' circuit breakers), ``/metrics`` (the API's
Prometheus metrics). No token needed: none of them carries an owner's data."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from memjobs_client.errors import MemjobsError
from memjobs_worker.http.problems import ProblemError
from memjobs_worker.http.routes import Ctx, errors
from memjobs_worker.http.schemas import Health, Ready

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is up."""
    return Health(status="ok")


#: What /readyz says of each backend that does not answer (no host, no port).
_UNREACHABLE = ("Redis is unreachable", "the state database (PostgreSQL) is unreachable")


@router.get("/readyz", response_model=Ready, responses=errors())
async def readyz(c: Ctx) -> Ready:
    """Redis and the state store answer (503 ``backend_unavailable`` otherwise,
    its detail naming which one does not).

    An open model circuit breaker answers 200 with ``status: degraded`` and the
    breaker's state under ``models``: the API still does its work (a remember is
    queued and its source kept pending until the model returns; forget, recall
    and the reads need no chat model), so taking it out of rotation would turn
    a model outage into an API outage. Alert on the breaker
    (``memjobs_model_circuit_open``), not on readiness."""
    for ping, unreachable in zip(c.pings, _UNREACHABLE, strict=True):  # Redis, then the state store
        try:
            await c.call(ping)
        except (MemjobsError, ProblemError) as exc:
            if isinstance(exc, ProblemError) and exc.reason != "backend_unavailable":
                raise
            raise ProblemError("backend_unavailable", unreachable) from None
    try:
        breakers = await c.call(c.model_breakers)
    except (MemjobsError, ProblemError) as exc:
        if isinstance(exc, ProblemError) and exc.reason != "backend_unavailable":
            raise
        raise ProblemError("backend_unavailable", _UNREACHABLE[0]) from None
    models = {b.service: "open" if b.is_open else "closed" for b in breakers}
    return Ready(
        status="degraded" if "open" in models.values() else "ready",
        redis="ok",
        state_store="ok",
        models=models,  # type: ignore[arg-type]
    )


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}},
            "description": "Prometheus text exposition",
        }
    },
)
async def metrics(c: Ctx) -> Response:
    """Requests by route template and status, latency, jobs enqueued."""
    return Response(generate_latest(c.metrics.registry), media_type=CONTENT_TYPE_LATEST)
