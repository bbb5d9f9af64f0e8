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
- nothing inferred gets in unchecked: every patch must quote, as ``evidence``,
  the user's own words from the transcript; a patch whose evidence is not in a
  user turn (invented, or the assistant's words) is refused as ``not_grounded``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from memjobs_client.contracts import ConsolidateSession, Turn
from memjobs_client.sensitive import find_sensitive_text, redact_secrets

WRITABLE = ("USER.md", "MEMORY.md")

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
- Each patch quotes, in "evidence", the user's exact words it comes from.
Answer with JSON only, in this shape:
{"patches": [{"doc": "MEMORY.md", "op": "append", "text": "- Lives in Hangzhou",
              "evidence": "I live in Hangzhou"},
             {"doc": "USER.md", "op": "replace", "old_text": "...", "new_text": "...",
              "evidence": "..."}]}
Answer {"patches": []} when nothing is worth keeping."""


class ChatModel(Protocol):
    def generate_response(self, messages: list[dict[str, str]], response_format: Any = None) -> str: ...


class OpResult(Protocol):
    applied: bool
    version: int
    reason: str | None


class Service(Protocol):
    """The memory service's operations this job uses (it audits what it applies or refuses)."""

    def read(self, owner_key: str, doc: str) -> Any: ...
    def append(self, owner_key: str, doc: str, text: str, *, session_id: str | None = None) -> Any: ...
    def replace(self, owner_key: str, doc: str, old_text: str, new_text: str, *,
                session_id: str | None = None) -> Any: ...


class Audit(Protocol):
    def record(self, *, owner_key: str, session_id: str | None, doc: str, op: str, applied: bool,
               reason: str | None, version: int | None) -> None: ...


class Patch(BaseModel):
    """One patch as the model must propose it."""

    model_config = ConfigDict(extra="forbid")

    doc: str
    op: Literal["append", "replace"]
    text: str | None = None
    old_text: str | None = None
    new_text: str | None = None
    evidence: str | None = None


@dataclass
class ConsolidationReport:
    applied: int = 0
    refused: dict[str, int] = field(default_factory=dict)

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1


def render_transcript(turns: Sequence[Turn]) -> str:
    """The transcript as the model sees it, secrets already redacted."""
    return "\n".join(f"{t.role}: {redact_secrets(t.text)}" for t in turns)


def build_messages(payload: ConsolidateSession, documents: dict[str, str]) -> list[dict[str, str]]:
    current = "\n\n".join(
        f"## {doc}\n{redact_secrets(text) if text.strip() else '(empty)'}" for doc, text in documents.items()
    )
    user = f"# Current documents\n\n{current}\n\n# Transcript\n\n{render_transcript(payload.transcript)}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


def parse_patches(reply: str) -> list[Any] | None:
    """The raw patch list of a reply, or None when the reply is not the agreed JSON."""
    try:
        data = json.loads(_FENCE.sub("", reply.strip()))
    except (json.JSONDecodeError, TypeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("patches"), list):
        return None
    return list(data["patches"])


def consolidate(
    payload: ConsolidateSession,
    *,
    model: ChatModel,
    service: Service,
    audit: Audit,
    max_patches: int,
    max_patch_chars: int,
) -> ConsolidationReport:
    """Ask the model for patches and apply the valid ones; audit every patch.

    Raises:
        ModelUnavailable: the model service failed (the job is retried).
    """
    owner, session = payload.owner_key, payload.session_id
    documents = {doc: _content(service.read(owner, doc)) for doc in WRITABLE}
    reply = model.generate_response(build_messages(payload, documents),
                                    response_format={"type": "json_object"})
    report = ConsolidationReport()

    def record(doc: str, op: str, applied: bool, reason: str | None, version: int | None,
               audited: bool = False) -> None:
        # The service audits what reaches it; refusals before it are audited here.
        if not audited:
            audit.record(owner_key=owner, session_id=session, doc=doc, op=op, applied=applied,
                         reason=reason, version=version)
        if applied:
            report.applied += 1
        else:
            report.refuse(reason or "refused")

    said = _normalise(" ".join(t.text for t in payload.transcript if t.role == "user"))
    raw = parse_patches(reply)
    if raw is None:
        record("-", "-", False, "model_output_invalid", None)
        return report
    for index, item in enumerate(raw):
        if index >= max_patches:
            record(_doc_name(item), _op_name(item), False, "too_many_patches", None)
            continue
        patch, reason = _validate(item, max_patch_chars)
        if patch is not None and not _grounded(patch, said):
            patch, reason = None, "not_grounded"
        if patch is None:
            record(_doc_name(item), _op_name(item), False, reason, None)
            continue
        if patch.op == "append":
            result = service.append(owner, patch.doc, patch.text or "", session_id=session)
        else:
            result = service.replace(owner, patch.doc, patch.old_text or "", patch.new_text or "",
                                     session_id=session)
        record(patch.doc, patch.op, bool(result.applied), result.reason, result.version, audited=True)
    return report


class Runs(Protocol):
    """The session-run bookkeeping (``memjobs_worker.sessions.SessionStore``)."""

    def claim_run(self, owner_key: str, session_id: str, kind: Literal["consolidate", "digest"]) -> bool: ...
    def finish_run(self, owner_key: str, session_id: str, kind: Literal["consolidate", "digest"]) -> None: ...


def run_consolidation(runs: Runs, payload: ConsolidateSession, **kwargs: Any) -> ConsolidationReport | None:
    """Consolidate once per (owner, session): None when the session was already done
    (a run left unfinished by a crash runs again; the service makes that harmless)."""
    if not runs.claim_run(payload.owner_key, payload.session_id, "consolidate"):
        return None
    report = consolidate(payload, **kwargs)
    runs.finish_run(payload.owner_key, payload.session_id, "consolidate")
    return report


def _validate(item: Any, max_chars: int) -> tuple[Patch | None, str]:
    try:
        patch = Patch.model_validate(item)
    except ValidationError:
        return None, "invalid_patch"
    if patch.doc not in WRITABLE:
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


def _normalise(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def _grounded(patch: Patch, said: str) -> bool:
    """The patch quotes (at least 2 characters of) what the user said."""
    evidence = _normalise(patch.evidence or "").strip(" .,!?;:，。！？；：\"'“”")
    return len(evidence) >= 2 and evidence in said


def _content(document: Any) -> str:
    return str(getattr(document, "content", "") or "")


def _doc_name(item: Any) -> str:
    doc = item.get("doc") if isinstance(item, dict) else None
    # Only a known name goes to the audit log: the model's string could be anything.
    return doc if doc in (*WRITABLE, "ASSISTANT.md") else "other"


def _op_name(item: Any) -> str:
    op = item.get("op") if isinstance(item, dict) else None
    return op if op in ("append", "replace") else "other"
