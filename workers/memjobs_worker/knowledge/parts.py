"""A corpus sent in several parts: which parts are in, and which documents they named.

What: :class:`CorpusParts` records, in Redis, each indexed part of a corpus
(:class:`~memjobs_client.contracts.CorpusPart`) and the ids of its documents;
once every part is in, it hands back the ids of the whole corpus, so the
owner's documents that are in no part can be removed.

Why Redis and not the message: a part cannot know the other parts' documents,
and parts may run in any order (a busy part is retried later). Recording each
part is idempotent (sets), so a retried part counts once. The keys expire
after :data:`TTL_S`: a corpus whose last part never arrives removes nothing,
the safe direction. The count of parts in is also the progress
``memjobs reindex --wait`` shows.
"""

from __future__ import annotations

from collections.abc import Collection

import redis

from memjobs_client import keys
from memjobs_client.contracts import CorpusPart
from memjobs_client.redis_seam import as_str, redis_errors

#: How long a corpus's record is kept after its last part.
TTL_S = 24 * 3600


class CorpusParts:
    """The parts of corpora indexed so far, in Redis."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def record(self, owner_key: str, part: CorpusPart, doc_ids: Collection[str]) -> set[str] | None:
        """Record that ``part`` is indexed with ``doc_ids``.

        Returns:
            The ids of every part's documents once all ``part.count`` parts are
            in (on each call from then on), else None.

        Raises:
            BackendUnavailable: Redis did not answer.
        """
        base = keys.knowledge_corpus(owner_key, part.corpus_id)
        with redis_errors("Redis did not record the corpus part"):
            pipe = self.client.pipeline()
            if doc_ids:
                pipe.sadd(f"{base}:docs", *doc_ids)
            pipe.sadd(f"{base}:parts", part.index)
            pipe.expire(f"{base}:docs", TTL_S)
            pipe.expire(f"{base}:parts", TTL_S)
            pipe.scard(f"{base}:parts")
            done = int(pipe.execute()[-1])
            if done < part.count:
                return None
            members = self.client.smembers(f"{base}:docs")
        return {as_str(m) for m in members}

    def done(self, owner_key: str, corpus_id: str) -> int:
        """How many parts of the corpus are indexed."""
        with redis_errors():
            return int(self.client.scard(f"{keys.knowledge_corpus(owner_key, corpus_id)}:parts"))
