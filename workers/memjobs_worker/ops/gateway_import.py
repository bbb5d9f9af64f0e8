"""``memjobs import-gateway``: what a single-host gateway of the seeds already
has, brought into memjobs.

The gateway's layout (one folder per user, named by the user's id, as its
``NOVA_AUDIO_AGENT_*_OWNER_ID`` names the owner)::

    <memory dir>/<owner id>/USER.md      → the owner's USER.md
    <memory dir>/<owner id>/MEMORY.md    → the owner's MEMORY.md
    <memory dir>/<owner id>/ASSISTANT.md → never imported (the assistant's persona)
    <knowledge dir>/<owner id>/…         → the owner's knowledge corpus (with consent)

A document goes through the memory service, as the memory tool's edits do
(``/v1/memory/edits``): its text is appended in blocks of at most one patch's
length, all of them or none, so the sensitivity check reads the document whole
and a refusal (a secret, a document over the bound) is reported for that file
and the import goes on. A block already in the owner's document, as whole
lines, is a duplicate: importing twice changes nothing and says ``unchanged``.
What memjobs already holds is kept: an import adds, it never deletes.

A knowledge folder is the owner's whole corpus, queued as ``memjobs reindex``
queues it (so documents the owner had indexed from elsewhere are replaced by
the folder's); a corpus whose documents are all indexed with the same content
is not queued again (``unchanged``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from memjobs_client.client import MemjobsClient
from memjobs_client.contracts import knowledge_path_id, owner_key
from memjobs_client.contracts.base import content_hash
from memjobs_client.errors import InvalidPayload, KnowledgeOff, PermanentError
from memjobs_worker.knowledge.targets import collect
from memjobs_worker.sessions.memory_docs import WRITABLE_DOCS, ChangeContext, Edit, MemoryService
from memjobs_worker.sessions.memory_docs.service import MAX_EDITS
from memjobs_worker.settings import KnowledgeSettings

#: The audit's ``source`` of an imported patch.
SOURCE = "gateway_import"
#: Bytes of a gateway document read at most (the service's bound is in characters).
MAX_FILE_BYTES = 1 << 20


class Documents(Protocol):
    """The knowledge store's listing of an owner's documents."""

    def documents(self, owner_key: str) -> Any: ...


def check_request(knowledge: KnowledgeSettings, memory_dir: Path, knowledge_dir: Path | None, *, consent: bool) -> None:
    """Refuse a request that cannot be done, before anything is read or written.

    Raises:
        InvalidPayload: a folder is missing, or a knowledge folder without consent.
        KnowledgeOff: a knowledge folder while knowledge is off.
    """
    for folder in (memory_dir, knowledge_dir):
        if folder is not None and not folder.is_dir():
            raise InvalidPayload(f"{folder} is not a directory", reason="invalid_payload")
    if knowledge_dir is not None:
        if not knowledge.enabled:
            raise KnowledgeOff()
        if not consent:
            raise InvalidPayload(
                "indexing the knowledge folder sends its text to the embedding "
                "service: it needs the users' consent (--consent)",
                reason="consent_required",
            )
    if not owner_folders(memory_dir):
        hint = (
            f": {memory_dir} holds the documents themselves; name the folder that holds one folder per user"
            if any((memory_dir / d).exists() for d in WRITABLE_DOCS)
            else ""
        )
        raise InvalidPayload(
            f"no user folders under {memory_dir} (the layout: <memory dir>/<owner id>/USER.md and MEMORY.md){hint}",
            reason="invalid_payload",
        )


def owner_folders(root: Path) -> list[Path]:
    """The user folders of ``root``: directories, not hidden, not symlinks, sorted."""
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))


def blocks(text: str, size: int) -> list[str]:
    """``text`` cut into blocks of at most ``size`` characters, at blank lines
    where it can, else at line ends, else anywhere; blank edges dropped."""
    paragraphs = (p.strip("\n") for p in text.replace("\r\n", "\n").split("\n\n"))
    pieces = (
        piece
        for paragraph in paragraphs
        if paragraph.strip()
        for piece in ([paragraph] if len(paragraph) <= size else _split_lines(paragraph, size))
    )
    return _pack(pieces, size, "\n\n")


def _split_lines(paragraph: str, size: int) -> list[str]:
    """A paragraph longer than ``size`` in blocks of whole lines, a line longer than ``size`` cut."""
    pieces = (line[i : i + size] for line in paragraph.split("\n") for i in range(0, max(len(line), 1), size))
    return _pack(pieces, size, "\n")


def _pack(pieces: Iterable[str], size: int, sep: str) -> list[str]:
    """``pieces`` (each at most ``size`` characters) in order, joined by ``sep`` into
    blocks of at most ``size`` characters, each as full as the next piece allows."""
    out: list[str] = []
    current = ""
    for piece in pieces:
        joined = f"{current}{sep}{piece}" if current else piece
        if len(joined) <= size:
            current = joined
        else:
            out.append(current)
            current = piece
    if current:
        out.append(current)
    return out


class GatewayImport:
    """One import: the owners' documents, then their knowledge corpora.

    Parameters:
        service: the memory service (the only writer of USER.md / MEMORY.md).
        roots: the host's allowed knowledge roots (``MEMJOBS_KNOWLEDGE_ROOTS``).
        knowledge: the knowledge store, read to tell an unchanged corpus (None: no knowledge import).
        client: the producer client that queues a corpus's reindex.
        progress: where a line per owner and per document goes.
    """

    def __init__(
        self,
        service: MemoryService,
        *,
        roots: list[Path],
        knowledge: Documents | None,
        client: MemjobsClient,
        progress: Callable[[str], None],
    ) -> None:
        self.service = service
        self.roots = roots
        self.knowledge = knowledge
        self.client = client
        self.progress = progress
        self.totals: Counter[str] = Counter()

    def run(self, memory_dir: Path, knowledge_dir: Path | None) -> dict[str, Any]:
        owners: dict[str, dict[str, Any]] = {}
        folders = owner_folders(memory_dir)
        for number, folder in enumerate(folders, 1):
            self.progress(f"[{number}/{len(folders)}] owner {_shown(folder.name)}")
            owners[folder.name] = {"documents": self.import_documents(folder)}
        if knowledge_dir is not None:
            for folder in owner_folders(knowledge_dir):
                self.progress(f"knowledge of owner {_shown(folder.name)}")
                owners.setdefault(folder.name, {})["knowledge"] = self.import_knowledge(folder)
        return {
            "owners": len(owners),
            "totals": dict(self.totals),
            "results": [{"owner": _shown(name), **result} for name, result in owners.items()],
        }

    def import_documents(self, folder: Path) -> list[dict[str, Any]]:
        owner = folder.name
        results = []
        for name in sorted(
            p.name for p in folder.iterdir() if p.suffix == ".md" and p.is_file() and not p.is_symlink()
        ):
            result = (
                self._one_document(owner, folder / name)
                if name in WRITABLE_DOCS
                else {"outcome": "skipped", "reason": "not_a_memory_document"}
            )
            result = {"doc": name, **result}
            self.totals[result["outcome"]] += 1
            said = result["outcome"] + (f" ({result['reason']})" if result.get("reason") else "")
            self.progress(f"    {name}: {said}")
            results.append(result)
        return results

    def _one_document(self, owner: str, path: Path) -> dict[str, Any]:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            return {"outcome": "refused", "reason": "too_long"}
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return {"outcome": "refused", "reason": "undecodable"}
        pieces = blocks(text, self.service.max_change_chars)
        if not pieces:
            return {"outcome": "unchanged", "reason": "empty"}
        if len(pieces) > MAX_EDITS:
            return {"outcome": "refused", "reason": "too_long"}
        edits = [Edit("append", path.name, text=piece) for piece in pieces]
        outcome = self.service.edit(owner, edits, context=ChangeContext(SOURCE))
        if not outcome.applied:
            return {"outcome": "refused", "reason": outcome.reason}
        if not outcome.changed:
            return {"outcome": "unchanged", "version": outcome.results[-1].version}
        return {
            "outcome": "imported",
            "version": outcome.documents[0].version,
            "blocks": sum(r.applied for r in outcome.results),
        }

    def import_knowledge(self, folder: Path) -> dict[str, Any]:
        assert self.knowledge is not None
        owner = folder.name
        result: dict[str, Any]
        try:
            found = collect([str(folder)], self.roots)
            stored = {d.doc_id: d.content_hash for d in self.knowledge.documents(owner_key(owner))}
            wanted = {knowledge_path_id(f): _file_hash(f) for f in found.files}
            if wanted and wanted == stored:
                result = {"outcome": "unchanged", "documents": len(wanted)}
            elif not found.files:
                result = {"outcome": "skipped", "reason": "no_documents"}
            else:
                sent = self.client.reindex_knowledge(owner, found.files, True, allowed_roots=found.roots)
                result = {"outcome": "queued", "documents": sent}
        except PermanentError as exc:  # a path outside the allowed roots, a sensitive one, …
            result = {"outcome": "refused", "reason": exc.reason}
        self.totals[f"knowledge {result['outcome']}"] += 1
        said = f"{result.get('documents', 0)} documents" if "documents" in result else result.get("reason")
        self.progress(f"    knowledge: {result['outcome']} ({said})")
        return result


def _file_hash(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return content_hash(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def _shown(owner: str) -> str:
    """An owner in progress lines: the start of its key, never the id (ids stay out of logs)."""
    return owner_key(owner)[:12]
