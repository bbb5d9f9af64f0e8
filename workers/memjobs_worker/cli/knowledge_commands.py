"""``memjobs`` subcommands of knowledge: reindex, knowledge search | list | rebuild.

With knowledge off, every one of them refuses the same way (exit 3, "knowledge
is off"), before reading a folder or touching Redis. ``knowledge list`` shows
the documents of a reindex still on its way (``queued``, then ``indexing``:
:mod:`memjobs_client.reindexing`); ``reindex --wait`` follows it to its end.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from memjobs_client import reindexing
from memjobs_client.contracts import MAX_CORPUS_DOCUMENTS, knowledge_path_id
from memjobs_client.errors import InvalidPayload, KnowledgeOff, PermanentError
from memjobs_worker.cli import exits
from memjobs_worker.cli.door import owner_arg, runtime_for
from memjobs_worker.cli.options import limited
from memjobs_worker.cli.output import emit, error, say, table
from memjobs_worker.cli.progress import Progress
from memjobs_worker.knowledge.search import MAX_K, search_with
from memjobs_worker.knowledge.targets import collect
from memjobs_worker.knowledge.walk import MAX_DEPTH, MAX_FILES
from memjobs_worker.settings import KnowledgeSettings, Settings


def reindex(settings: Settings, args: argparse.Namespace) -> int:
    """Queue the owner's whole corpus; say how many documents it adds, replaces
    (re-embedded only where their text changed) and deletes. No documents at all
    would empty the collection: refused unless ``--allow-empty``."""
    if not settings.knowledge.enabled:
        raise KnowledgeOff()  # before the folder is even walked
    if not args.consent:
        raise InvalidPayload(
            "re-indexing sends the documents' text to the embedding service: it needs the user's consent (--consent)",
            reason="consent_required",
        )
    found = collect(args.path, settings.knowledge.root_paths, max_depth=args.max_depth, max_files=args.max_files)
    progress = _progress if sys.stderr.isatty() else None
    with runtime_for(settings) as rt:
        stored = {d.doc_id for d in rt.knowledge.documents(owner_arg(args.owner))}
        if not found.files and not args.allow_empty:
            raise InvalidPayload(
                f"no documents under {', '.join(args.path)}: a re-index with none would delete all "
                f"{len(stored)} indexed documents of this owner; pass --allow-empty to do that",
                reason="empty_corpus",
            )
        named = {knowledge_path_id(f) for f in found.files}
        try:
            sent = rt.client.reindex_knowledge(
                args.owner, found.files, args.consent, allowed_roots=found.roots, on_part=progress
            )
        except PermanentError as exc:
            if exc.reason == "consent_required":
                raise InvalidPayload(str(exc).replace("consent=True", "--consent"), reason=exc.reason) from None
            raise
        parts = -(-max(sent, 1) // MAX_CORPUS_DOCUMENTS)
        document = {
            "documents": sent,
            "add": len(named - stored),
            "replace": len(named & stored),
            "delete": len(stored - named),
            "parts": parts,
            "status": "queued",
            "skipped": found.listing.skipped,
            "skipped_counts": dict(found.listing.skipped_counts),
        }
        if not args.json:
            _say_queued(document, found.listing.skipped)
        if args.wait is None:
            if args.json:
                emit(document, as_json=True)
            return exits.OK
        waited = _wait(rt, owner_arg(args.owner), args)
    document["status"] = "indexed" if waited else "indexing"
    if args.json:
        emit(document, as_json=True)
    elif waited:
        say("indexed: `memjobs knowledge list` shows each document's state")
    else:
        error(f"still indexing after {args.wait:g} s: `memjobs knowledge list` shows where it is; the workers go on")
    return exits.OK if waited else exits.FAILED


def _say_queued(document: dict[str, Any], skipped: list[dict[str, Any]]) -> None:
    parts = document["parts"]
    say(
        f"queued {document['documents']} documents in {parts} part{'s' if parts > 1 else ''}: "
        f"{document['add']} to add, {document['replace']} to replace, {document['delete']} to delete"
    )
    counts = document["skipped_counts"]
    if counts:
        say("skipped: " + ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in sorted(counts.items())))
    for item in skipped[:20]:
        say(f"  {item.get('name', '?')}: {str(item.get('reason', '')).replace('_', ' ')}")


def _wait(rt: Any, key: str, args: argparse.Namespace) -> bool:
    """Follow the owner's reindex until its last part is written (True) or
    ``--wait`` seconds have passed (False), with progress on stderr."""
    progress = Progress("documents", doing="indexing", as_json=args.json)
    deadline = time.monotonic() + args.wait
    try:
        while (record := reindexing.read(rt.redis, key)) is not None:
            if time.monotonic() >= deadline:
                return False
            total = len(record["documents"])
            left = total - total * record["parts_done"] // max(record["parts"], 1)
            progress.update(
                left,
                total=total,
                detail=f"{record['state']}, part {min(record['parts_done'] + 1, record['parts'])} of {record['parts']}",
            )
            time.sleep(0.2)
        return True
    finally:
        progress.clear()


def _progress(index: int, count: int, documents: int) -> None:
    print(f"queued part {index}/{count} ({documents} documents)", file=sys.stderr, flush=True)


def knowledge(settings: Settings, args: argparse.Namespace) -> int:
    if not settings.knowledge.enabled:
        raise KnowledgeOff()
    with runtime_for(settings) as rt:
        if args.op == "rebuild":
            emit({"chunks_rebuilt": rt.knowledge.rebuild_index()}, as_json=args.json)
            return exits.OK
        key = owner_arg(args.owner) if args.owner else ""
        if not key:
            raise InvalidPayload(f"knowledge {args.op} needs --owner")
        if args.op == "list":
            rows = _with_the_reindex_on_its_way(
                rt, key, [_document(d, settings.knowledge) for d in rt.knowledge.documents(key)]
            )
            emit(
                limited(rows, args, "documents"),
                as_json=args.json,
                columns=["doc_id", "title", "state", "reason", "limit", "chunks"],
                empty="no documents",
            )
            return exits.OK
        if not args.query or not args.query.strip():
            raise InvalidPayload("knowledge search needs --query")
        if not 1 <= args.k <= MAX_K:
            raise InvalidPayload(f"--k must be between 1 and {MAX_K}")
        # The store (hence the switch) before the embedder.
        store = rt.knowledge
        outcome = search_with(store, rt.knowledge_embedder, key, args.query, args.k, all_chunks=args.all_chunks)
    results = [
        {"text": r.text, "score": r.score, "title": r.title, "source": r.source, "trust": r.trust}
        for r in outcome.results
    ]
    if args.json:
        emit({"mode": outcome.mode, "notice": outcome.notice, "results": results}, as_json=True)
        return exits.OK
    if outcome.notice:
        say(f"memjobs: {outcome.notice}", err=True)
    if not results:
        say(f"no results ({outcome.mode} search)")
        return exits.OK
    say(table(results, ["score", "title", "source", "trust", "text"]))
    return exits.OK


def size_limit(reason: str | None, knowledge: KnowledgeSettings) -> str | None:
    """The cap a ``too_large`` refusal ran into, said with its setting."""
    if reason == "too_large":
        return (
            f"MEMJOBS_KNOWLEDGE_MAX_FILE_BYTES={knowledge.max_file_bytes} bytes per file, "
            f"MEMJOBS_KNOWLEDGE_MAX_DOC_CHARS={knowledge.max_doc_chars} characters per document"
        )
    if reason == "corpus_too_large":
        return f"MEMJOBS_KNOWLEDGE_MAX_CORPUS_CHARS={knowledge.max_corpus_chars} characters per corpus"
    return None


def _with_the_reindex_on_its_way(rt: Any, key: str, stored: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``stored`` with the documents of the owner's reindex still queued or being
    indexed: new ones first, stored ones it names in its state (``queued``,
    ``indexing``) until it is written."""
    record = reindexing.read(rt.redis, key)
    if record is None:
        return stored
    by_id = {row["doc_id"]: row for row in stored}
    new = []
    for doc_id, title in record["documents"]:
        if doc_id in by_id:
            by_id[doc_id]["state"] = record["state"]
        else:
            new.append(
                {
                    "doc_id": doc_id,
                    "title": title,
                    "source": None,
                    "state": record["state"],
                    "reason": None,
                    "limit": None,
                    "chars": None,
                    "chunks": None,
                    "updated_at": None,
                }
            )
    return new + stored


def _document(d: Any, knowledge: KnowledgeSettings) -> dict[str, Any]:
    return {
        "doc_id": d.doc_id,
        "title": d.title,
        "source": d.source_label,
        "state": d.state,
        "reason": d.reason,
        "limit": size_limit(d.reason, knowledge),
        "chars": d.chars,
        "chunks": d.chunks,
        "updated_at": d.updated_at.isoformat(),
    }


def reindex_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--owner", required=True, help="the owner (user) id whose documents these are")
    p.add_argument(
        "--path", action="append", required=True, help="a file or directory (repeatable); the owner's whole corpus"
    )
    p.add_argument(
        "--consent", action="store_true", help="the user consents to sending the text to the embedding service"
    )
    p.add_argument(
        "--max-depth",
        type=_positive,
        default=MAX_DEPTH,
        help=f"folder levels walked below a --path (default {MAX_DEPTH})",
    )
    p.add_argument(
        "--max-files",
        type=_positive,
        default=MAX_FILES,
        help=f"files listed in all (default {MAX_FILES}); the rest are reported skipped",
    )
    p.add_argument(
        "--allow-empty", action="store_true", help="allow a corpus of no documents (empties the owner's collection)"
    )
    p.add_argument(
        "--wait",
        type=float,
        nargs="?",
        const=3600.0,
        default=None,
        metavar="SECONDS",
        help="wait until the workers have indexed it, showing progress (at most SECONDS, "
        "default 3600; exit 1 if still indexing)",
    )


def knowledge_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "op",
        choices=["search", "list", "rebuild"],
        help="search the owner's documents, list them (with their state), or rebuild "
        "the full-text index of every owner",
    )
    p.add_argument("--owner", help="the owner (user) id (search and list)")
    p.add_argument("--query", help="search: what to look for, in any language")
    p.add_argument(
        "--limit", type=int, default=100, help="list: at most this many documents, the latest first (default 100)"
    )
    p.add_argument("--k", type=int, default=5, help=f"results, 1 to {MAX_K} (default 5)")
    p.add_argument(
        "--all-chunks",
        action="store_true",
        help="every matching chunk; by default one result per document (its best chunk)",
    )


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number
