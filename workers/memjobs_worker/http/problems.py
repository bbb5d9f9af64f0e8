"""RFC 9457 problem documents: every error the API returns, one stable ``type`` per reason.

What: :data:`PROBLEMS` names each reason (its ``type`` URI, HTTP status and
title); :func:`problem_response` builds the ``application/problem+json`` reply;
:func:`install` maps memjobs errors, validation errors, Starlette's HTTP errors
and anything unexpected onto them.

Why: a gateway in any language branches on ``type`` (never on prose), and no
reply may carry a stack trace or the request's own text. The ``detail`` is
built from the error's message (memjobs errors never quote input) or, for
validation, from field names and pydantic's messages without their input.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from memjobs_client.errors import (
    BackendUnavailable,
    InvalidPayload,
    KnowledgeOff,
    LockLost,
    MemjobsError,
    MemoryOff,
    ModelUnavailable,
    RedisFull,
    SensitiveContent,
    TransientError,
)
from memjobs_worker.embedding.fair import ModelBusy
from memjobs_worker.embedding.record import EmbeddingModelChanged

log = logging.getLogger(__name__)

PROBLEM_BASE = "urn:memjobs:problem:"
MEDIA_TYPE = "application/problem+json"


@dataclass(frozen=True)
class ProblemType:
    """A problem type: its URI is :data:`PROBLEM_BASE` followed by its ``reason``."""

    reason: str
    status: int
    title: str


PROBLEMS: dict[str, ProblemType] = {
    p.reason: p
    for p in (
        ProblemType("validation", 422, "The request does not fit the contract"),
        ProblemType("malformed_json", 400, "The body is not a JSON document"),
        ProblemType("unsupported_media_type", 415, "The body must be application/json"),
        ProblemType("sensitive_content", 422, "The content looks like a credential; nothing was stored"),
        ProblemType("consent_required", 422, "Re-indexing needs the user's consent"),
        ProblemType("memory_off", 409, "Personal memory is switched off"),
        ProblemType("knowledge_off", 409, "Knowledge is switched off"),
        ProblemType("not_found", 404, "No such resource"),
        ProblemType("ambiguous", 409, "The old text occurs more than once; nothing was changed"),
        ProblemType("forbidden_document", 422, "Only USER.md and MEMORY.md can be read or changed"),
        ProblemType("method_not_allowed", 405, "Method not allowed on this resource"),
        ProblemType("unauthorized", 401, "A valid bearer token is required"),
        ProblemType("forbidden", 403, "This token may not call this route"),
        ProblemType("too_large", 413, "The request body is over the limit"),
        ProblemType("malformed_request", 400, "The request is not well-formed HTTP/1.1"),
        ProblemType("headers_too_large", 431, "The request line and headers are over the limit"),
        ProblemType("untrusted_host", 400, "The Host header names no address this server answers for"),
        ProblemType("request_timeout", 408, "The request was not sent in time"),
        ProblemType("too_many_requests", 429, "Too many requests open from this client; retry later"),
        ProblemType("model_busy", 429, "This owner's earlier requests still hold its share of the model; retry later"),
        ProblemType("overloaded", 503, "Too many requests in flight; retry later"),
        ProblemType("redis_full", 503, "Redis is full: nothing was queued; retry once the workers have drained it"),
        ProblemType("backend_unavailable", 503, "Redis or the state store did not answer in time"),
        ProblemType("model_unavailable", 503, "The model or embedding service did not answer"),
        ProblemType(
            "embedding_model_changed", 503, "Stored vectors came from another embedding model: run `memjobs reembed`"
        ),
        ProblemType(
            "erase_incomplete", 503, "The owner's jobs were still running; nothing more was erased: call again"
        ),
        ProblemType("internal", 500, "Internal error"),
    )
}

#: Seconds a client should wait after an ``overloaded`` or ``*_unavailable`` reply.
RETRY_AFTER_S = 1


class ProblemError(Exception):
    """Raised by routes and dependencies to answer with a problem document."""

    def __init__(self, reason: str, detail: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail
        self.headers = headers or {}


def problem_response(
    reason: str,
    detail: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> JSONResponse:
    """The ``application/problem+json`` reply for ``reason``."""
    kind = PROBLEMS[reason]
    body: dict[str, Any] = {"type": PROBLEM_BASE + reason, "title": kind.title, "status": kind.status, "reason": reason}
    if detail:
        body["detail"] = detail
    if extra:
        body.update(extra)
    all_headers = dict(headers or {})
    if kind.status in (408, 429, 503):
        all_headers.setdefault("Retry-After", str(RETRY_AFTER_S))
    return JSONResponse(body, status_code=kind.status, headers=all_headers, media_type=MEDIA_TYPE)


#: Problem reasons by error class, the first class the error is an instance of
#: wins (a subclass before its base: knowledge off before configuration).
BY_CLASS: tuple[tuple[type[MemjobsError], str], ...] = (
    (EmbeddingModelChanged, "embedding_model_changed"),
    (SensitiveContent, "sensitive_content"),
    (MemoryOff, "memory_off"),
    (KnowledgeOff, "knowledge_off"),
    (InvalidPayload, "validation"),
    (RedisFull, "redis_full"),
    (ModelBusy, "model_busy"),
    (BackendUnavailable, "backend_unavailable"),
    (ModelUnavailable, "model_unavailable"),
    (LockLost, "backend_unavailable"),
    (TransientError, "backend_unavailable"),
)


def reason_of(exc: MemjobsError) -> str:
    """The problem reason of a memjobs error, by its class (``consent_required``
    is an :class:`InvalidPayload` with its own reason, ``erase_incomplete`` a
    :class:`TransientError` with its own)."""
    if exc.reason in ("consent_required", "erase_incomplete"):
        return exc.reason
    return next((reason for cls, reason in BY_CLASS if isinstance(exc, cls)), "internal")


_SAFE_NAME = re.compile(r"^[a-z_]{1,40}$")
#: Messages of pydantic's that name a class of the API's (or say nothing a
#: caller can use), in the caller's terms, by error type.
_PLAIN = {
    error_type: message
    for message, error_types in (
        ("unknown field", ("extra_forbidden",)),
        ("must be a JSON object", ("model_type", "model_attributes_type", "dataclass_type", "dict_type")),
        ("has the wrong type", ("is_instance_of",)),
        ("is not one of the accepted kinds", ("union_tag_invalid", "union_tag_not_found")),
    )
    for error_type in error_types
}
_PYDANTIC_PREFIX = re.compile(r"^(?:Value error|Assertion failed), ")


def validation_detail(errors: list[Any], known_fields: frozenset[str]) -> str:
    """What is wrong, in the caller's terms, never the input: a header by its
    name (``X-Memjobs-Owner header is required``), a query parameter by its
    name, a body field by its path (a path element that is not a known field
    name, an unknown key being the caller's text, or an index is ``*``); and
    what is wrong without the API's class names (pydantic's "instance of Turn")."""
    parts = []
    for err in errors[:10]:
        where = _where(tuple(err.get("loc", ())), known_fields)
        message = _PLAIN.get(str(err.get("type")), str(err.get("msg", "invalid")))
        if err.get("type") == "missing":
            parts.append(f"{where} is required")
            continue
        message = _PYDANTIC_PREFIX.sub("", message)
        if len(message) > 200:
            message = message[:200]
        parts.append(f"{where}: {message}")
    more = len(errors) - 10
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _where(loc: tuple[Any, ...], known_fields: frozenset[str]) -> str:
    """``loc`` (FastAPI's: the request part, then the path in it) said as the
    caller wrote it. Headers and query parameters are the API's own names (only
    declared ones are validated), so they are shown; so are known body fields."""
    part, path = (loc[0], loc[1:]) if loc else ("body", ())
    if part == "header" and path:
        return "-".join(word.capitalize() for word in str(path[0]).split("-")) + " header"
    if part in ("query", "path") and path and _SAFE_NAME.match(str(path[0])):
        return f"{part} parameter {path[0]}"
    shown = [
        str(p) if isinstance(p, int) or (isinstance(p, str) and p in known_fields and _SAFE_NAME.match(p)) else "*"
        for p in path
    ]
    return ".".join(shown) or "body"


def install(app: FastAPI, known_fields: frozenset[str]) -> None:
    """Register the handlers that turn every error into a problem document."""

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ProblemError)
        return problem_response(exc.reason, exc.detail, headers=exc.headers)

    async def on_memjobs(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, MemjobsError)
        reason = reason_of(exc)
        if reason == "internal":
            log.error("request failed", extra={"reason": exc.reason})
            return problem_response("internal")
        if PROBLEMS[reason].status >= 500:
            # The message may name hosts and ports: the title says enough.
            log.warning("backend call failed", extra={"reason": exc.reason})
            return problem_response(reason)
        return problem_response(reason, str(exc)[:500])

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            return problem_response("malformed_json", "the body could not be parsed as JSON")
        # A contract model whose field validator refuses a credential says so by error type.
        sensitive = [e for e in errors if e.get("type") == "sensitive_content"]
        if sensitive:
            return problem_response("sensitive_content", validation_detail(sensitive, known_fields))
        return problem_response("validation", validation_detail(errors, known_fields))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        reason = {
            400: "malformed_json",
            404: "not_found",
            405: "method_not_allowed",
            413: "too_large",
            401: "unauthorized",
            403: "forbidden",
        }.get(exc.status_code, "validation")
        return problem_response(reason, headers=dict(exc.headers or {}))

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Only the exception's class name: its message may quote the request.
        log.error("unexpected error", extra={"error": type(exc).__name__})
        return problem_response("internal")

    app.add_exception_handler(ProblemError, on_problem)
    app.add_exception_handler(MemjobsError, on_memjobs)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
