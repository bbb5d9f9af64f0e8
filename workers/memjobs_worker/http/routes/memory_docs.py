"""The memory tool over HTTP (USER.md and MEMORY.md), and the memory audit for operators.

- ``GET /v1/memory/documents`` and ``GET /v1/memory/documents/{doc}`` (the owner
  in ``X-Memjobs-Owner``): read through the memory service, as the tool's
  ``read``; ASSISTANT.md and any other name are ``forbidden_document``. The
  pair carries an ``ETag`` (a hash of both documents and the provider): a
  gateway's provider cache revalidates with ``If-None-Match`` and gets ``304``
  with no body while nothing changed.
- ``POST /v1/memory/edits``: one turn's edits (``append``; ``replace`` of a
  unique ``old_text``, an empty replacement deletes), applied in order, all or
  none, with one result; ``not_found``, ``ambiguous``, ``sensitive_content`` and
  ``forbidden_document`` are problems naming the edit; the ``context`` (source,
  session, turn, trace) is the gateway's and goes to the provider and the audit.
- ``GET /v1/ops/memory-audit`` (host token, or a scoped token with ``admin``
  for every owner): the audit trail, latest first, never memory text.

Gateway tier (the ``read`` and ``write`` scopes) like the other memory routes.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Response

from memjobs_client.errors import InvalidPayload
from memjobs_worker.http.auth import needs
from memjobs_worker.http.body import JsonRoute
from memjobs_worker.http.problems import ProblemError
from memjobs_worker.http.routes import COMMON, Ctx, OwnerId, errors, owner_key_of
from memjobs_worker.http.schemas import (
    BIGINT_MAX,
    MemoryAudit,
    MemoryAuditEntry,
    MemoryDocument,
    MemoryDocuments,
    MemoryEditResult,
    MemoryEditsApplied,
    MemoryEditsRequest,
    MemoryProviderInfo,
)
from memjobs_worker.sessions.memory_docs import (
    WRITABLE_DOCS,
    ChangeContext,
    Document,
    Edit,
    EditOutcome,
)

tool = APIRouter(prefix="/v1/memory", tags=["memory tool"], route_class=JsonRoute)
audit_router = APIRouter(
    prefix="/v1/ops/memory-audit",
    tags=["operations"],
    dependencies=[needs("admin", per_owner=False)],
    route_class=JsonRoute,
)
router = APIRouter()

#: Refusals of an edit, as problems (the others are ``validation``).
PROBLEM_OF = {
    "not_found": "not_found",
    "ambiguous": "ambiguous",
    "sensitive_content": "sensitive_content",
    "forbidden_document": "forbidden_document",
}
SAID = {
    "not_found": "old_text occurs nowhere in the document",
    "ambiguous": "old_text occurs more than once: quote more of the line",
    "sensitive_content": "it looks like a credential; nothing was stored",
    "forbidden_document": "only USER.md and MEMORY.md can be changed",
    "too_long": "the text, or the document it would make, is over the limit",
    "empty": "the text (or old_text) is empty",
}


def _out(d: Document) -> MemoryDocument:
    return MemoryDocument(doc=d.doc, scope=d.scope, content=d.content, version=d.version)  # type: ignore[arg-type]


def entity_tag(documents: MemoryDocuments) -> str:
    """A strong ETag of the documents as served: their contents and versions, and the
    provider (a changed provider or an erased-then-rewritten document changes it too)."""
    body = json.dumps(documents.model_dump(mode="json"), ensure_ascii=False, sort_keys=True)
    return '"' + hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()[:32] + '"'


def matches(if_none_match: str | None, tag: str) -> bool:
    """Whether ``If-None-Match`` names ``tag`` (weak forms and ``*`` included, RFC 9110)."""
    if if_none_match is None:
        return False
    named = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in named or tag in named


@tool.get(
    "/documents",
    dependencies=[needs("read")],
    response_model=MemoryDocuments,
    responses={
        304: {"description": "Not modified: the documents still have the ETag named by If-None-Match (no body)"},
        **errors(*COMMON),
    },
)
async def read_documents(
    owner: OwnerId,
    c: Ctx,
    response: Response,
    if_none_match: Annotated[
        str | None,
        Header(max_length=512, description="an ETag of an earlier answer: 304 while the documents are unchanged"),
    ] = None,
) -> MemoryDocuments | Response:
    """USER.md and MEMORY.md of the owner (empty ones at version 0), and which provider keeps them.

    The answer's ``ETag`` changes whenever a document does; with ``If-None-Match``
    naming it, the answer is ``304`` without a body (a provider cache's cheap poll)."""
    service = c.parts.memory_docs
    docs = await c.call(service.snapshot, owner)
    info = service.describe()
    found = MemoryDocuments(
        documents=[_out(d) for d in docs], provider=None if info is None else MemoryProviderInfo(**info.as_json())
    )
    tag = entity_tag(found)
    if matches(if_none_match, tag):
        return Response(status_code=304, headers={"ETag": tag})
    response.headers["ETag"] = tag
    return found


@tool.get(
    "/documents/{doc}",
    dependencies=[needs("read")],
    response_model=MemoryDocument,
    responses=errors(*COMMON, "forbidden_document"),
)
async def read_document(
    owner: OwnerId, c: Ctx, doc: str = Path(min_length=1, max_length=64, description="USER.md or MEMORY.md")
) -> MemoryDocument:
    """One document, read again before any write should be planned on it (the tool's ``read``)."""
    if doc not in WRITABLE_DOCS:
        raise ProblemError("forbidden_document", "only USER.md and MEMORY.md can be read")
    return _out(await c.call(c.parts.memory_docs.read, owner, doc))


@tool.post(
    "/edits",
    dependencies=[needs("write")],
    response_model=MemoryEditsApplied,
    responses=errors(*COMMON, "not_found", "ambiguous", "sensitive_content", "forbidden_document"),
)
async def edit_documents(body: MemoryEditsRequest, c: Ctx) -> MemoryEditsApplied:
    """Apply one turn's edits in order, all or none, each on the latest documents.

    ``append`` adds Markdown on its own line (already there: ``duplicate``, a
    no-op); ``replace`` swaps the unique occurrence of ``old_text`` for
    ``new_text`` (empty: deletes it, with its line when it was a whole line).
    One refused edit refuses the turn and nothing is written: the problem's
    ``detail`` names the edit (``edits[1]: …``). Every edit is audited, never
    its text."""
    owner_key_of(body.owner_id)  # an empty owner id is a validation problem
    try:
        context = ChangeContext(
            body.context.source, session=body.context.session, turn=body.context.turn, trace=body.context.trace
        )
    except InvalidPayload as exc:
        raise ProblemError("validation", str(exc)) from None
    edits = [
        Edit(
            e.op,
            e.doc,
            text=e.text,
            old_text=e.old_text,
            new_text=e.new_text if e.new_text is not None else "" if e.op == "replace" else None,
        )
        for e in body.edits
    ]
    outcome: EditOutcome = await c.call(c.parts.memory_docs.edit, body.owner_id, edits, context=context)
    if not outcome.applied:
        index, reason = outcome.failed or 0, outcome.reason or "not_found"
        edit = edits[index]
        where = edit.doc if edit.doc in WRITABLE_DOCS else "another document"
        raise ProblemError(
            PROBLEM_OF.get(reason, "validation"),
            f"edits[{index}] ({edit.op} in {where}): {SAID.get(reason, reason)}; no edit of this request was applied",
        )
    return MemoryEditsApplied(
        changed=outcome.changed,
        edits=[
            MemoryEditResult(
                op=e.op,
                doc=r.doc,
                applied=r.applied,
                reason="duplicate" if r.reason == "duplicate" else None,
                version=r.version,
            )
            for e, r in zip(edits, outcome.results, strict=True)
        ],
        documents=[_out(d) for d in outcome.documents],
    )


@audit_router.get("", response_model=MemoryAudit, responses=errors(*COMMON, "forbidden"))
async def memory_audit(
    c: Ctx,
    owner_key: Annotated[
        str | None, Query(pattern=r"^[0-9a-f]{64}$", description="only this owner (sha256 of the owner id)")
    ] = None,
    session: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    source: Annotated[str | None, Query(min_length=1, max_length=40)] = None,
    since: Annotated[datetime | None, Query(description="only entries at or after this time")] = None,
    before_id: Annotated[int | None, Query(ge=1, le=BIGINT_MAX, description="page: entries older than this id")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> MemoryAudit:
    """The memory audit trail of every host, latest first: whether each patch was
    applied, why not, the version, the source and the producer's ids; never the text."""
    entries = await c.call(
        c.parts.audit.entries,
        owner_key=owner_key,
        session=session,
        source=source,
        since=since,
        before_id=before_id,
        limit=limit,
    )
    out = [MemoryAuditEntry(**e.as_dict()) for e in entries]
    return MemoryAudit(entries=out, next_before_id=out[-1].id if len(out) == limit else None)


router.include_router(tool)
router.include_router(audit_router)
