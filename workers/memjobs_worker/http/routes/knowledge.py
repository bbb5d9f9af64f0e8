"""Knowledge: ``/v1/knowledge/reindex`` (host token, consent) and ``/v1/knowledge/search``."""

from __future__ import annotations

from fastapi import APIRouter

from memjobs_client.errors import KnowledgeOff
from memjobs_client.sensitive import ensure_not_sensitive
from memjobs_worker.http.auth import needs
from memjobs_worker.http.body import JsonRoute
from memjobs_worker.http.context import ensure_wanted
from memjobs_worker.http.routes import COMMON, Ctx, check_query_chars, errors, owner_key_of
from memjobs_worker.http.schemas import (
    KnowledgeHit,
    KnowledgeResults,
    KnowledgeSearchRequest,
    ReindexAccepted,
    ReindexRequest,
)

router = APIRouter(prefix="/v1/knowledge", tags=["knowledge"], route_class=JsonRoute)


@router.post(
    "/reindex",
    status_code=202,
    response_model=ReindexAccepted,
    dependencies=[needs("admin")],
    responses=errors(*COMMON, "forbidden", "consent_required", "sensitive_content", "knowledge_off"),
)
async def reindex(body: ReindexRequest, c: Ctx) -> ReindexAccepted:
    """Queue a re-index of the owner's whole corpus (documents as text; the
    owner's documents not named are removed). Host token only, and only with
    the user's consent. A document that looks like a credential refuses the
    whole call with ``sensitive_content``: nothing is queued."""
    if not c.knowledge_on:
        raise KnowledgeOff()  # before the documents are even looked at, as the CLI
    documents = [d.model_dump(mode="json") for d in body.documents]
    await c.compute(_ensure_no_credential, documents)  # up to a megabyte: off the event loop
    sent = await c.call(c.client.reindex_knowledge, body.owner_id, documents, body.consent)
    return ReindexAccepted(documents=sent, status="queued")


def _ensure_no_credential(documents: list[dict[str, str]]) -> None:
    """Refuse the call when a document's id, title or text looks like a credential
    (in the computing thread, stopping once the request is gone)."""
    for i, doc in enumerate(documents):
        ensure_wanted()
        for name in ("doc_id", "title", "text"):
            ensure_not_sensitive(text=doc[name], field=f"documents.{i}.{name}")


@router.post(
    "/search",
    response_model=KnowledgeResults,
    dependencies=[needs("knowledge")],
    responses=errors(*COMMON, "knowledge_off", "model_busy"),
)
async def search(body: KnowledgeSearchRequest, c: Ctx) -> KnowledgeResults:
    """Hybrid search of the owner's documents; results are untrusted external text.

    The query is bounded and the embedding shared as a recall's (``validation`` over
    ``MEMJOBS_API_MAX_QUERY_CHARS`` characters, ``model_busy`` for an owner whose
    earlier requests hold its share of the model)."""
    check_query_chars(body.query, c.api.max_query_chars)
    outcome = await c.call(c.search_knowledge, owner_key_of(body.owner_id), body.query, body.k)
    return KnowledgeResults(
        mode=outcome.mode,
        notice=outcome.notice,
        results=[
            KnowledgeHit(text=r.text, score=r.score, title=r.title, source=r.source, trust=r.trust)
            for r in outcome.results
        ],
    )
