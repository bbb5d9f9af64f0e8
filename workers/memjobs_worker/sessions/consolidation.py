"""``consolidate_session``: a light model proposes bounded Markdown patches to
USER.md and MEMORY.md from a session's transcript; the memory service applies
the valid ones; every patch is audited.

Guarantees, whatever the model says:
- only USER.md and MEMORY.md are ever written (ASSISTANT.md never);
- secrets are filtered twice: out of the text sent to the model
  (``redact_secrets``) and out of the patches that come back (refused);
- bounded: at most ``max_patches`` per session, ``max_patch_chars`` per patch
  (the service also caps each document);
- one bad patch (wrong shape, unknown document, ambiguous ``old_text``) is
  refused and audited, the session's other valid patches still apply, and no
  document is ever half-written (each patch is one atomic service call);
- re-running a session's job adds nothing more (the service treats an append
  already present, or a replacement already made, as a duplicate);
- nothing inferred gets in: every patch must quote, as ``evidence``, the
  user's own words from a user turn of this session, and what the patch states
  must be covered by that quote (:mod:`~memjobs_worker.sessions.grounding`);
  otherwise it is refused as ``not_grounded``;
- a reply that is not the agreed JSON is asked again once, then the job fails
  with ``model_output_invalid`` (:mod:`~memjobs_worker.sessions.prompting`);
- a current document that fails the sensitivity check read whole (a secret
  split over lines, which redaction does not see) is never sent: the model is
  not asked, the run ends with ``sensitive_document`` (audited and logged
  without the text) until the document is cleared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from memjobs_client.contracts import ConsolidateSession
from memjobs_client.errors import StaleFencingToken
from memjobs_client.sensitive import find_sensitive_document, find_sensitive_text, redact_secrets
from memjobs_worker.model_client import ChatModel
from memjobs_worker.sessions.grounding import grounded
from memjobs_worker.sessions.memory_docs.audit import AuditEntry
from memjobs_worker.sessions.memory_docs.protocol import WRITABLE_DOCS, ChangeContext, OwnerKey
from memjobs_worker.sessions.prompting import (
    ModelOutputInvalid,
    ask_json,
    parse_json_object,
    render_transcript,
)

log = logging.getLogger(__name__)

SYSTEM_PROMPT = """You maintain two Markdown memory documents about the user of a voice assistant.
USER.md holds the user's explicit, long-term instructions about how to interact with them
(how to address them, how long or in which language to reply), and only what the user said.
MEMORY.md holds stable facts and decisions about the user: where they live, habits, interests,
relationships, projects, goals and plans.
Read the transcript and the current documents and propose the smallest set of patches that
records what is missing, or corrects what the user changed.
Rules:
- Record only what the user said explicitly. Never infer: no guessed names, preferences,
  moods or traits. A name or a reply preference goes to USER.md only when the user asked.
- One item per patch: several items in one sentence become several patches.
- Never touch ASSISTANT.md or any document other than USER.md and MEMORY.md.
- Never record passwords, keys, codes or other secrets.
- Do not repeat what a document already says.
- Each patch quotes, in "evidence", the user's exact words it comes from, and says no more
  than those words: write the patch in the user's own words and language.
Answer with JSON only, in this shape:
{"patches": [{"doc": "MEMORY.md", "op": "append", "text": "- Lives in Hangzhou",
              "evidence": "I live in Hangzhou"},
             {"doc": "USER.md", "op": "replace", "old_text": "...", "new_text": "...",
              "evidence": "..."}]}
Answer {"patches": []} when nothing is worth keeping."""
_SHAPE = '{"patches": [{"doc": "MEMORY.md", "op": "append", "text": "...", "evidence": "..."}]}'


class OpResult(Protocol):
    applied: bool
    version: int
    reason: str | None


class Service(Protocol):
    """The memory service's operations this job uses (it audits what it applies or refuses).
    ``owner`` is the owner id, or an :class:`OwnerKey` from an older producer's message."""

    def read(self, owner: str, doc: str) -> Any: ...
    def append(self, owner: str, doc: str, text: str, *, context: ChangeContext | None = None) -> Any: ...
    def replace(
        self, owner: str, doc: str, old_text: str, new_text: str, *, context: ChangeContext | None = None
    ) -> Any: ...


class Audit(Protocol):
    def record(self, entries: Sequence[AuditEntry]) -> None: ...


class Patch(BaseModel):
    """One patch as the model must propose it."""

    model_config = ConfigDict(extra="forbid")

    doc: str
    op: Literal["append", "replace"]
    text: str | None = None
    old_text: str | None = None
    new_text: str | None = None
    evidence: str | None = None


#: Why a consolidation sent nothing to the model: a current document holds a
#: secret read whole (split over lines or edits, or written before documents were
#: checked whole). The run ends ``failed`` with this reason, the job's outcome is
#: this reason, and the audit has a row with it; the text is never logged.
SENSITIVE_DOCUMENT = "sensitive_document"


@dataclass
class ConsolidationReport:
    applied: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    skipped: str | None = None  # why nothing was asked of the model (SENSITIVE_DOCUMENT)

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1


def build_messages(payload: ConsolidateSession, documents: dict[str, str]) -> list[dict[str, str]]:
    current = "\n\n".join(
        f"## {doc}\n{redact_secrets(text) if text.strip() else '(empty)'}" for doc, text in documents.items()
    )
    user = f"# Current documents\n\n{current}\n\n# Transcript\n\n{render_transcript(payload.transcript)}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def parse_patches(reply: str) -> list[Any]:
    """The raw patch list of a reply.

    Raises:
        ModelOutputInvalid: the reply is not a JSON object with a list ``patches``.
    """
    patches = parse_json_object(reply).get("patches")
    if not isinstance(patches, list):
        raise ModelOutputInvalid("the reply has no list 'patches'")
    return list(patches)


def consolidate(
    payload: ConsolidateSession,
    *,
    model: ChatModel,
    service: Service,
    audit: Audit,
    max_patches: int,
    max_patch_chars: int,
    still_held: Callable[[], bool] = lambda: True,
) -> ConsolidationReport:
    """Ask the model for patches and apply the valid ones; audit every patch.

    ``still_held`` is asked before each patch is applied: once the run's claim
    is lost (taken over after a stall), nothing more is applied.

    Raises:
        ModelUnavailable: the model service failed (the job is retried).
        ModelOutputInvalid: two replies in a row were not the agreed JSON
            (audited as ``model_output_invalid``; nothing is applied).
        StaleFencingToken: the claim was lost before every patch was applied.
    """
    session = payload.session_id
    # The provider gets the owner id (a host's adapter maps tenants by it); a message
    # of an older producer carries only the key, which the built-in providers take.
    owner = payload.owner_id if payload.owner_id is not None else OwnerKey(payload.owner_key)
    context = ChangeContext("consolidation", session=session)
    documents = {doc: _content(service.read(owner, doc)) for doc in WRITABLE_DOCS}
    report = ConsolidationReport()
    for doc, text in documents.items():
        finding = find_sensitive_document(text)
        if finding is not None:
            # Redaction does not see a secret split over lines: the document is not sent.
            audit.record(
                [
                    AuditEntry.of(
                        owner_key=payload.owner_key,
                        doc=doc,
                        op="-",
                        applied=False,
                        reason=SENSITIVE_DOCUMENT,
                        version=None,
                        context=context,
                    )
                ]
            )
            # The key's first characters (as dead letters show it): never the whole key,
            # which an owner's erasure must leave in no log (docs/data-lifecycle.md).
            log.warning(
                "consolidation skipped: a memory document fails the sensitivity check",
                extra={"doc": doc, "rule": finding.rule, "owner": payload.owner_key[:12]},
            )
            report.skipped = SENSITIVE_DOCUMENT
            return report

    def record(
        doc: str, op: str, applied: bool, reason: str | None, version: int | None, audited: bool = False
    ) -> None:
        # The service audits what reaches it; refusals before it are audited here.
        if not audited:
            audit.record(
                [
                    AuditEntry.of(
                        owner_key=payload.owner_key,
                        doc=doc,
                        op=op,
                        applied=applied,
                        reason=reason,
                        version=version,
                        context=context,
                    )
                ]
            )
        if applied:
            report.applied += 1
        else:
            report.refuse(reason or "refused")

    try:
        raw = ask_json(model, build_messages(payload, documents), parse_patches, shape=_SHAPE)
    except ModelOutputInvalid:
        record("-", "-", False, "model_output_invalid", None)
        raise
    said = [redact_secrets(t.text) for t in payload.transcript if t.role == "user"]
    for index, item in enumerate(raw):
        if index >= max_patches:
            record(_doc_name(item), _op_name(item), False, "too_many_patches", None)
            continue
        patch, reason = _validate(item, max_patch_chars)
        if patch is not None and _grounding(patch, said) is not None:
            # One audit reason for every grounding refusal (the finer one is
            # for tests and tuning; the audit stays stable for its readers).
            patch, reason = None, "not_grounded"
        if patch is None:
            record(_doc_name(item), _op_name(item), False, reason, None)
            continue
        if not still_held():
            raise StaleFencingToken(
                "the session run was taken over; no more patches applied", reason="stale_fencing_token"
            )
        if patch.op == "append":
            result = service.append(owner, patch.doc, patch.text or "", context=context)
        else:
            result = service.replace(owner, patch.doc, patch.old_text or "", patch.new_text or "", context=context)
        record(patch.doc, patch.op, bool(result.applied), result.reason, result.version, audited=True)
    return report


def _validate(item: Any, max_chars: int) -> tuple[Patch | None, str]:
    try:
        patch = Patch.model_validate(item)
    except ValidationError:
        return None, "invalid_patch"
    if patch.doc not in WRITABLE_DOCS:
        return None, "forbidden_document"
    texts = [patch.text] if patch.op == "append" else [patch.old_text, patch.new_text]
    if patch.op == "append" and not (patch.text or "").strip():
        return None, "invalid_patch"
    if patch.op == "replace" and not (patch.old_text or "").strip():
        return None, "invalid_patch"
    if any(t is not None and len(t) > max_chars for t in texts):
        return None, "too_long"
    if any(t and find_sensitive_text(t) for t in texts):
        return None, "sensitive_content"
    return patch, ""


def _grounding(patch: Patch, said: list[str]) -> str | None:
    """None when the patch is grounded in the user's words, else the refusal's reason."""
    if patch.op == "append":
        return grounded(patch.doc, patch.text or "", patch.evidence, said)
    deletion = not (patch.new_text or "").strip()
    return grounded(patch.doc, patch.new_text or "", patch.evidence, said, deletion=deletion)


def _content(document: Any) -> str:
    return str(getattr(document, "content", "") or "")


def _doc_name(item: Any) -> str:
    doc = item.get("doc") if isinstance(item, dict) else None
    # Only a known name goes to the audit log: the model's string could be anything.
    return doc if doc in (*WRITABLE_DOCS, "ASSISTANT.md") else "other"


def _op_name(item: Any) -> str:
    op = item.get("op") if isinstance(item, dict) else None
    return op if op in ("append", "replace") else "other"
