"""``memjobs reembed``: re-embed stored vectors after a change of embedder.

Memories and knowledge chunks whose vectors another embedder made (the stack
refuses to use them, naming this command) are re-embedded with the current one
(:mod:`memjobs_worker.ops.reembed`); knowledge chunks without a vector get one.
Resumable: an interrupted run is finished by the next. Progress goes to
stderr — what is left, the rate, the time left (:mod:`memjobs_worker.cli.progress`);
``--check`` only says what is left (exit 1 when a re-embedding is required).
"""

from __future__ import annotations

import argparse

from memjobs_worker.cli import exits
from memjobs_worker.cli.output import emit, say
from memjobs_worker.cli.progress import Progress
from memjobs_worker.endpoints import resolve_endpoints
from memjobs_worker.settings import Settings


def reembed(settings: Settings, args: argparse.Namespace) -> int:
    from memjobs_worker.ops.reembed import pending
    from memjobs_worker.ops.reembed import reembed as run

    database_url = resolve_endpoints(settings.data_dir, settings.redis, settings.database).database_url
    left = pending(settings.embedding, settings.memory, settings.knowledge, database_url)
    if args.check:
        emit(
            {
                "model": left.model,
                "memories": left.memories,
                "foreign_chunks": left.foreign_chunks,
                "chunks_without_vector": left.bare_chunks,
                "required": left.required,
            },
            as_json=args.json,
        )
        return exits.FAILED if left.required else exits.OK
    if not (left.required or left.bare_chunks):
        if args.json:
            emit({"model": left.model, "memories": 0, "chunks": 0}, as_json=True)
        else:
            say(f"nothing to re-embed: every stored vector is {left.model}'s")
        return exits.OK

    reports: dict[str, Progress] = {}

    def progress(what: str, done: int, total: int) -> None:
        if not total:
            return
        report = reports.setdefault(what, Progress(f"{what}", doing="re-embedding", as_json=args.json))
        report.update(total - done, total=total, detail=f"with {left.model}", force=done in (0, total))

    memories, chunks = run(
        settings.model, settings.embedding, settings.memory, settings.knowledge, database_url, progress=progress
    )
    for report in reports.values():
        report.clear()
    if args.json:
        emit({"model": left.model, "memories": memories, "chunks": chunks}, as_json=True)
    else:
        say(f"re-embedded {memories:,} memories and {chunks:,} knowledge chunks with {left.model}")
    return exits.OK


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--check", action="store_true", help="only say what is left to re-embed (exit 1 when the stack would refuse)"
    )
