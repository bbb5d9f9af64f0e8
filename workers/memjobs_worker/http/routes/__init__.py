"""The API's routes, one module per area; :data:`ERRORS` documents their problem replies."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Header

from memjobs_client import payloads
from memjobs_client.contracts import owner_key
from memjobs_worker.http.auth import MAX_OWNER_HEADER, owner_id_of_header
from memjobs_worker.http.context import ApiContext, ctx
from memjobs_worker.http.problems import MEDIA_TYPE, PROBLEMS, ProblemError

_PROBLEM_SCHEMA = {"$ref": "#/components/schemas/Problem"}


def errors(*reasons: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the problem replies a route can give."""
    out: dict[int | str, dict[str, Any]] = {}
    for reason in dict.fromkeys(
        reasons + ("internal", "overloaded", "backend_unavailable", "request_timeout", "too_many_requests")
    ):
        kind = PROBLEMS[reason]
        entry = out.setdefault(kind.status, {"description": "", "content": {MEDIA_TYPE: {"schema": _PROBLEM_SCHEMA}}})
        entry["description"] = "; ".join(filter(None, [entry["description"], kind.title]))
    return out


#: The problem replies every JSON route can give.
COMMON = ("validation", "malformed_json", "unsupported_media_type", "unauthorized", "forbidden", "too_large")


def owner_key_of(owner_id: str) -> str:
    """The storage key of a body's ``owner_id``.

    Raises:
        InvalidPayload: an empty owner id.
    """
    return payloads.owner_key_of(owner_id, "owner_id: must be a non-empty string")


async def owner_id_header(
    owner: str = Header(
        alias="X-Memjobs-Owner",
        min_length=1,
        max_length=MAX_OWNER_HEADER,
        description="the owner id, UTF-8 percent-encoded (as encodeURIComponent "
        "does); in a header so that it never appears in a URL or an access log",
    ),
) -> str:
    """Dependency of the GET routes that hand the owner id on (a memory provider maps
    tenants by it): the decoded, checked owner id (:func:`~memjobs_worker.http.auth.owner_id_of_header`)."""
    decoded = owner_id_of_header(owner)
    if decoded is None:
        raise ProblemError("validation", "X-Memjobs-Owner: must be a non-empty, percent-encoded UTF-8 owner id")
    return decoded


async def owner_header(owner: str = Depends(owner_id_header)) -> str:
    """Dependency of the GET routes: the owner's storage key (sha256 of the id)."""
    return owner_key(owner)


def check_query_chars(query: str, limit: int) -> None:
    """Refuse a recall or search query longer than ``limit`` characters
    (``MEMJOBS_API_MAX_QUERY_CHARS``) before anything is checked or embedded.

    Raises:
        ProblemError: ``validation``, naming the cap and its setting.
    """
    if len(query) > limit:
        raise ProblemError(
            "validation",
            f"query: {len(query)} characters, over the limit of {limit} characters (MEMJOBS_API_MAX_QUERY_CHARS)",
        )


#: A route's context parameter: ``c: Ctx``.
Ctx = Annotated[ApiContext, Depends(ctx)]
#: A GET route's owner parameter: the storage key of the ``X-Memjobs-Owner`` owner.
OwnerKey = Annotated[str, Depends(owner_header)]
#: A GET route's owner parameter: the ``X-Memjobs-Owner`` owner id itself.
OwnerId = Annotated[str, Depends(owner_id_header)]
