"""``memjobs`` subcommands of knowledge: reindex, knowledge search | list | rebuild."""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path
from typing import Any

from memjobs_client.errors import InvalidPayload, PermanentError
from memjobs_worker.cli import exits
from memjobs_worker.cli.commands import owner_arg, runtime_for
from memjobs_worker.cli.output import emit
from memjobs_worker.knowledge.search import search_knowledge
from memjobs_worker.settings import Settings


def expand(paths: list[str]) -> tuple[list[str], list[str]]:
    """Files under the named paths (directories walked), and the roots the host allows:
    exactly the paths named."""
    files: list[str] = []
    roots: list[str] = []
    for raw in paths:
        path = Path(raw).expanduser().absolute()
        if not path.exists():
            raise InvalidPayload(f"no such file or directory: {raw}")
        roots.append(str(path))
        if path.is_file():
            files.append(str(path))
            continue
        for folder, _dirs, names in sorted(os.walk(path)):
            files += [str(Path(folder) / n) for n in sorted(names)]
    return files, roots


def file_doc_id(path: str) -> str:
    """The doc id the worker gives a local file (knowledge/reindex.py ``_read_path``)."""
    return "file:" + hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:24]


def reindex(settings: Settings, args: argparse.Namespace) -> int:
    """Queue the owner's whole corpus; say how many documents it adds, replaces
    (re-embedded only where their text changed) and deletes. No documents at all
    would empty the collection: refused unless ``--allow-empty``."""
    files, roots = expand(args.path)
    if not args.consent:
        raise InvalidPayload("re-indexing sends the documents' text to the embedding service: it "
                             "needs the user's consent (--consent)", reason="consent_required")
    with runtime_for(settings) as rt:
        key = owner_arg(args.owner)
        stored = {d.doc_id for d in rt.knowledge.documents(key)} if settings.knowledge_enabled else set()
        if not files and not args.allow_empty:
            raise InvalidPayload(
                f"no documents under {', '.join(args.path)}: a re-index with none would delete all "
                f"{len(stored)} indexed documents of this owner; pass --allow-empty to do that",
                reason="empty_corpus")
        named = {file_doc_id(f) for f in files}
        try:
            sent = rt.client.reindex_knowledge(args.owner, files, args.consent, allowed_roots=roots)
        except PermanentError as exc:
            if exc.reason == "consent_required":
                raise InvalidPayload(str(exc).replace("consent=True", "--consent"),
                                     reason=exc.reason) from None
            raise
    emit({"documents": sent, "add": len(named - stored), "replace": len(named & stored),
          "delete": len(stored - named), "status": "queued"}, as_json=args.json)
    return exits.OK


def knowledge(settings: Settings, args: argparse.Namespace) -> int:
    with runtime_for(settings) as rt:
        if args.op == "rebuild":
            emit({"chunks_rebuilt": rt.knowledge.rebuild_index()}, as_json=args.json)
            return exits.OK
        key = owner_arg(args.owner) if args.owner else ""
        if not key:
            raise InvalidPayload(f"knowledge {args.op} needs --owner")
        if args.op == "list":
            emit([_document(d, settings) for d in rt.knowledge.documents(key)], as_json=args.json,
                 columns=["doc_id", "title", "state", "reason", "limit", "chunks"])
            return exits.OK
        if not args.query or not args.query.strip():
            raise InvalidPayload("knowledge search needs --query")
        embedder = rt.knowledge_embedder
        outcome = search_knowledge(rt.knowledge, key, args.query, args.k,
                                   embed=embedder.embed if embedder is not None else None)
    results = [{"text": r.text, "score": r.score, "title": r.title, "source": r.source,
                "trust": r.trust} for r in outcome.results]
    emit({"mode": outcome.mode, "notice": outcome.notice, "results": results}, as_json=args.json)
    return exits.OK


def size_limit(reason: str | None, settings: Settings) -> str | None:
    """The cap a ``too_large`` refusal ran into, said with its setting."""
    if reason == "too_large":
        return (f"MEMJOBS_KNOWLEDGE_MAX_FILE_BYTES={settings.knowledge_max_file_bytes} bytes per file, "
                f"MEMJOBS_KNOWLEDGE_MAX_DOC_CHARS={settings.knowledge_max_doc_chars} characters per document")
    if reason == "corpus_too_large":
        return f"MEMJOBS_KNOWLEDGE_MAX_CORPUS_CHARS={settings.knowledge_max_corpus_chars} characters per corpus"
    return None


def _document(d: Any, settings: Settings) -> dict[str, Any]:
    return {"doc_id": d.doc_id, "title": d.title, "source": d.source_label, "state": d.state,
            "reason": d.reason, "limit": size_limit(d.reason, settings), "chars": d.chars,
            "chunks": d.chunks, "updated_at": d.updated_at.isoformat()}


def add_parsers(add: Any) -> None:
    p = add("reindex", reindex, "queue a re-index of an owner's documents (needs --consent)",
            listing=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--path", action="append", required=True,
                   help="a file or directory (repeatable); the owner's whole corpus")
    p.add_argument("--consent", action="store_true",
                   help="the user consents to sending the text to the embedding service")
    p.add_argument("--allow-empty", action="store_true",
                   help="allow a corpus of no documents (empties the owner's collection)")

    p = add("knowledge", knowledge, "search or list an owner's knowledge; rebuild the full-text index",
            listing=True)
    p.add_argument("op", choices=["search", "list", "rebuild"])
    p.add_argument("--owner")
    p.add_argument("--query")
    p.add_argument("--k", type=int, default=5)
