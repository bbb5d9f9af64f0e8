"""Dead letters for operators: ``/v1/ops/dead-letters`` (host token).

List (no text, an owner key prefix at most), show one (payload redacted unless
``reveal=true``), retry one / a queue / all on the original queue, purge one /
older than a duration / all. Replays are safe: jobs are idempotent, and a
letter is taken out of the dead set in one step, so two retries enqueue it once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field, model_validator

from memjobs_client.contracts import QUEUES
from memjobs_worker.http.auth import needs
from memjobs_worker.http.body import JsonRoute
from memjobs_worker.http.context import ApiContext
from memjobs_worker.http.problems import ProblemError
from memjobs_worker.http.routes import COMMON, Ctx, errors
from memjobs_worker.ops.deadletters import DeadLetters

router = APIRouter(
    prefix="/v1/ops/dead-letters",
    tags=["operations"],
    dependencies=[needs("admin", per_owner=False)],
    route_class=JsonRoute,
)

LetterId = Path(
    min_length=1,
    max_length=64,
    pattern=r"^[A-Za-z0-9-]+$",
    description="the message id (as job log lines carry it) or the dead-letter id",
)


class DeadLetterOut(BaseModel):
    message_id: str
    redis_id: str = Field(description="the letter's member id in the dead-letter set")
    queue: str
    actor: str
    reason: str = Field(
        description="a memjobs error's reason (model_unavailable, invalid_payload, "
        "…) or the exception's class name; never its message"
    )
    attempts: int
    first_failed_at: datetime | None
    last_failed_at: datetime = Field(description="when it was dead-lettered")
    owner: str | None = Field(
        description="the first characters of the owner key (sha256 of the owner id); never the id"
    )
    replays: int = Field(description="times an operator replayed it")


class DeadLetterList(BaseModel):
    dead_letters: list[DeadLetterOut]
    counts: dict[str, int] = Field(description="letters per queue")


class DeadLetterDetail(DeadLetterOut):
    options: dict[str, Any] | None = None
    payload: dict[str, Any] | None = Field(description="strings redacted but ids and enumerations, unless reveal=true")
    error: str | None = Field(default=None, description="with reveal=true: the error's last line, secrets redacted")


class RetryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queue: str | None = Field(default=None, description="every letter of this queue; or all=true")
    all: bool = False

    @model_validator(mode="after")
    def _one_target(self) -> RetryRequest:
        if (self.queue is None) == (not self.all):
            raise ValueError("name a queue or set all=true (one of the two)")
        if self.queue is not None and self.queue not in QUEUES:
            raise ValueError(f"queue: one of {', '.join(QUEUES)}")
        return self


class PurgeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queue: str | None = Field(default=None, description="only this queue")
    older_than_s: float | None = Field(
        default=None, ge=0, description="only letters dead longer than this many seconds"
    )
    all: bool = Field(default=False, description="every letter (of queue): needed without older_than_s")

    @model_validator(mode="after")
    def _bounded(self) -> PurgeRequest:
        if not self.all and self.older_than_s is None:
            raise ValueError("set older_than_s, or all=true")
        if self.queue is not None and self.queue not in QUEUES:
            raise ValueError(f"queue: one of {', '.join(QUEUES)}")
        return self


class Retried(BaseModel):
    retried: int
    skipped: int = Field(default=0, description="undecodable letters, which only purge removes")


class Purged(BaseModel):
    purged: int


def letters_of(c: ApiContext) -> DeadLetters:
    """The dead letters, through the API's producer broker (bounded Redis calls)."""
    broker = c.client.broker
    return DeadLetters(broker.client, broker)


@router.get("", response_model=DeadLetterList, responses=errors(*COMMON, "forbidden"))
async def list_letters(c: Ctx, queue: str | None = Query(default=None, description="one queue")) -> DeadLetterList:
    """Every dead letter, the latest failure first: no text, no owner id."""
    if queue is not None and queue not in QUEUES:
        raise ProblemError("validation", f"queue: one of {', '.join(QUEUES)}")
    letters = letters_of(c)
    found = await c.call(letters.letters, queue)
    counts = await c.call(letters.count)
    return DeadLetterList(dead_letters=[DeadLetterOut(**x.as_dict()) for x in found], counts=counts)


@router.post("/retry", response_model=Retried, responses=errors(*COMMON, "forbidden"))
async def retry_many(body: RetryRequest, c: Ctx) -> Retried:
    """Replay every letter of a queue, or all of them, on their original queues."""
    retried, skipped = await c.call(letters_of(c).retry_all, body.queue)
    return Retried(retried=retried, skipped=skipped)


@router.post("/purge", response_model=Purged, responses=errors(*COMMON, "forbidden"))
async def purge_many(body: PurgeRequest, c: Ctx) -> Purged:
    """Delete letters for good: those dead longer than ``older_than_s``, or all (of a queue)."""
    purged = await c.call(letters_of(c).purge_all, body.queue, older_than_s=body.older_than_s)
    return Purged(purged=purged)


@router.get("/{letter_id}", response_model=DeadLetterDetail, responses=errors(*COMMON, "forbidden", "not_found"))
async def show_letter(
    c: Ctx, letter_id: str = LetterId, reveal: bool = Query(default=False, description="the payload's text too")
) -> DeadLetterDetail:
    """One letter with its payload, text redacted unless ``reveal=true``."""
    shown = await c.call(letters_of(c).show, letter_id, reveal=reveal)
    if shown is None:
        raise ProblemError("not_found", "no dead letter has this id")
    return DeadLetterDetail(**shown)


@router.post("/{letter_id}/retry", response_model=Retried, responses=errors(*COMMON, "forbidden", "not_found"))
async def retry_letter(c: Ctx, letter_id: str = LetterId) -> Retried:
    """Replay one letter on its original queue (404 when it is gone, e.g. replayed already)."""
    if not await c.call(letters_of(c).retry, letter_id):
        raise ProblemError("not_found", "no dead letter has this id")
    return Retried(retried=1)


@router.delete("/{letter_id}", response_model=Purged, responses=errors(*COMMON, "forbidden", "not_found"))
async def purge_letter(c: Ctx, letter_id: str = LetterId) -> Purged:
    """Delete one letter for good."""
    if not await c.call(letters_of(c).purge, letter_id):
        raise ProblemError("not_found", "no dead letter has this id")
    return Purged(purged=1)
