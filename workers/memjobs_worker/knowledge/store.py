"""The knowledge corpus on PostgreSQL: documents, chunks, keyword and vector search.

What: :class:`KnowledgeStore` keeps each owner's documents and chunks in the
tables of :mod:`memjobs_worker.knowledge.schema` and answers two rankings over them,
full-text (``ts_rank_cd``) and cosine (pgvector ``<=>``), always within one
owner.

Why these rules:
- A document is replaced whole, in one transaction, so a search never sees a
  mix of two versions. A refused new version (say, it now contains a secret)
  also removes the chunks of the version before it: search must never return
  content the owner has since replaced.
- The raw chunk text is the source of truth; tokens and ``tsvector`` derive
  from it and :meth:`KnowledgeStore.rebuild_index` can always recompute them.
  The ``tsvector`` joins the words through ``english`` (stemmed, stop words
  dropped) and the CJK characters and bigrams through ``simple``.
- Queries are user input: every value is a bound parameter, the full-text
  query is built from ``plainto_tsquery`` per token (so ``a & b | !(c`` is
  never tsquery syntax), and queries with no usable token fall back to a
  bounded ``ILIKE`` with ``%``, ``_`` and ``\\`` escaped (see
  :mod:`memjobs_worker.knowledge.queries`).

Every method is one transaction; a database that does not answer raises
:class:`~memjobs_client.errors.BackendUnavailable`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, Engine

from memjobs_client.errors import InvalidPayload
from memjobs_worker.clock import Clock, utcnow
from memjobs_worker.db.connect import transaction
from memjobs_worker.db.rows import record_of
from memjobs_worker.fulltext import TOKENIZER_VERSION, index_tokens, split_tokens
from memjobs_worker.knowledge.queries import (
    MAX_DIMS,
    check_text,
    idf,
    keyword_select,
    term_counts_select,
    text_array,
    to_hit,
    tsvector_of,
    vector_select,
)
from memjobs_worker.knowledge.records import ChunkHit, DocumentRecord, StoredChunk
from memjobs_worker.knowledge.schema import TOKENIZER_KEY, knowledge_chunks, knowledge_documents, knowledge_meta
from memjobs_worker.ranking import question_weight

__all__ = ["KnowledgeStore", "StoredChunk", "DocumentRecord", "ChunkHit"]

#: Chunks re-tokenised per round trip by :meth:`KnowledgeStore.rebuild_index`.
REBUILD_BATCH = 500

_chunks, _docs = knowledge_chunks, knowledge_documents


class KnowledgeStore:
    """Each owner's knowledge corpus in the state database.

    Parameters:
        engine: an engine on a database where :func:`~memjobs_worker.knowledge.schema.ensure_schema` ran.
        clock: the time source for ``updated_at`` (tests inject one).
    """

    def __init__(self, engine: Engine, *, clock: Clock = utcnow) -> None:
        self.engine = engine
        self.clock = clock

    def _tx(self) -> AbstractContextManager[Connection]:
        return transaction(self.engine)

    # -- documents ------------------------------------------------------------------

    def documents(self, owner_key: str) -> list[DocumentRecord]:
        """The owner's documents, by ``doc_id``."""
        with self._tx() as conn:
            rows = conn.execute(sa.select(_docs).where(_docs.c.owner_key == owner_key).order_by(_docs.c.doc_id)).all()
        return [record_of(DocumentRecord, r) for r in rows]

    def chunk_embeddings(self, owner_key: str, chunk_hashes: Collection[str], dims: int) -> dict[str, list[float]]:
        """Stored embeddings of ``dims`` dimensions for these chunk hashes.

        Any of the owner's documents may supply one, so a re-index (or a copy
        of a document) sends only new or changed chunks to the embedding service.
        """
        if not chunk_hashes:
            return {}
        c = _chunks.c
        with self._tx() as conn:
            rows = conn.execute(
                sa.select(c.chunk_hash, c.embedding)
                .where(
                    c.owner_key == owner_key,
                    c.dims == dims,
                    c.embedding.is_not(None),
                    c.chunk_hash == sa.any_(text_array(chunk_hashes)),
                )
                .order_by(c.chunk_hash, c.doc_id, c.chunk_index)
            ).all()
        found: dict[str, list[float]] = {}
        for r in rows:
            found.setdefault(r.chunk_hash, r.embedding)
        return found

    def put_document(
        self,
        owner_key: str,
        doc_id: str,
        title: str,
        source_label: str,
        content_hash: str,
        chunks: Sequence[StoredChunk],
        *,
        chars: int | None = None,
    ) -> None:
        """Store a document and its chunks, replacing any earlier version whole.

        ``chars`` is the document's length in characters (default: the total
        length of the chunk texts). Tokens are computed here, the ``tsvector``
        from them in SQL, and each embedding is stored with its ``dims``.

        Raises:
            InvalidPayload: duplicate chunk indexes, NUL characters, or an empty,
                non-finite or over-long embedding. Nothing is written.
        """
        rows = [_chunk_row(owner_key, doc_id, chunk) for chunk in chunks]
        if len({r["chunk_index"] for r in rows}) != len(rows):
            raise InvalidPayload("chunk indexes must be distinct")
        check_text(owner_key, doc_id, title, source_label, content_hash)
        total = sum(len(chunk.text) for chunk in chunks) if chars is None else chars
        with self._tx() as conn:
            _reset_document(
                conn,
                (owner_key, doc_id, title, source_label, content_hash),
                state="indexed",
                reason=None,
                chars=total,
                chunks=len(rows),
                updated_at=self.clock(),
            )
            if rows:
                conn.execute(
                    _chunks.insert().values(
                        tsv=tsvector_of("words_in", "unspaced_in"),
                        tokens=sa.bindparam("tokens_in", type_=sa.Text),
                    ),
                    rows,
                )

    def refuse_document(
        self,
        owner_key: str,
        doc_id: str,
        title: str,
        reason: str,
        *,
        source_label: str = "",
        content_hash: str | None = None,
    ) -> None:
        """Record a document as refused (with why) and drop any chunks it had.

        The chunks of an earlier, indexed version go too: the owner replaced
        that content, so search must no longer return it.
        """
        check_text(owner_key, doc_id, title, reason, source_label, content_hash or "")
        with self._tx() as conn:
            _reset_document(
                conn,
                (owner_key, doc_id, title, source_label, content_hash),
                state="refused",
                reason=reason,
                chars=0,
                chunks=0,
                updated_at=self.clock(),
            )

    def remove_documents_except(self, owner_key: str, keep_doc_ids: Collection[str]) -> int:
        """Delete the owner's documents (and their chunks) not in ``keep_doc_ids``.

        Returns:
            How many documents were deleted.
        """
        with self._tx() as conn:
            deleted = conn.execute(
                _docs.delete()
                .where(_docs.c.owner_key == owner_key, _docs.c.doc_id != sa.all_(text_array(keep_doc_ids)))
                .returning(_docs.c.doc_id)
            ).all()
        return len(deleted)

    # -- search -----------------------------------------------------------------------

    def keyword_search(
        self, owner_key: str, query: str, limit: int, *, min_should_match: float = 0.0
    ) -> list[ChunkHit]:
        """The owner's chunks best matching any token of ``query``, best first.

        Ranked by the summed rarity (BM25 idf over the owner's chunks) of the
        distinct query tokens a chunk contains, then by ``ts_rank_cd``. With
        ``min_should_match`` (a share, see
        :data:`memjobs_worker.ranking.MIN_SHOULD_MATCH`) only chunks holding at
        least that share of the query's weight
        (:func:`memjobs_worker.ranking.question_weight`) are kept.

        A query with no usable token (only punctuation, or single Latin
        letters or digits) is searched as a literal substring instead, among
        the owner's chunks only, at most ``limit`` of them, with rank 0.0.
        """
        with self._tx() as conn:

            def weigh(tokens: list[str]) -> tuple[list[float], float]:
                total, *row = conn.execute(term_counts_select(owner_key, tokens)).one()
                containing, looked_up = [int(n) for n in row[: len(tokens)]], row[len(tokens) :]
                least = (
                    min_should_match * question_weight(int(total), containing, looked_up) * (1 - 1e-9)
                    if min_should_match > 0
                    else 0.0
                )
                return [idf(int(total), n) for n in containing], least

            stmt = keyword_select(owner_key, query, limit, weigh)
            if stmt is None:
                return []
            rows = conn.execute(stmt).all()
        return [to_hit(r) for r in rows]

    def vector_search(self, owner_key: str, vector: Sequence[float], limit: int) -> list[ChunkHit]:
        """The owner's chunks nearest ``vector`` by cosine distance, nearest first.

        Only chunks embedded with the same number of dimensions are compared;
        ``rank`` is the cosine similarity. A zero or empty vector finds nothing.

        Raises:
            InvalidPayload: a value is NaN or infinite.
        """
        stmt = vector_select(owner_key, vector, limit)
        if stmt is None:
            return []
        with self._tx() as conn:
            rows = conn.execute(stmt).all()
        return [to_hit(r) for r in rows]

    # -- the index --------------------------------------------------------------------

    def index_is_stale(self) -> bool:
        """True when stored tokens come from another tokenizer version or lack a tsvector."""
        c = _chunks.c
        with self._tx() as conn:
            version = conn.execute(
                sa.select(knowledge_meta.c.value).where(knowledge_meta.c.key == TOKENIZER_KEY)
            ).scalar()
            missing = conn.execute(
                sa.select(sa.literal(1)).where(sa.or_(c.tsv.is_(None), c.tokens.is_(None))).limit(1)
            ).first()
        return version != str(TOKENIZER_VERSION) or missing is not None

    def rebuild_index(self, owner_key: str | None = None) -> int:
        """Recompute tokens and tsvector from the raw chunk text, in one transaction.

        With ``owner_key`` only that owner's chunks are rebuilt and the stored
        tokenizer version is left alone (other owners may still be stale); a
        full rebuild records the current version.

        Returns:
            How many chunks were rebuilt.
        """
        c = _chunks.c
        key = sa.tuple_(c.owner_key, c.doc_id, c.chunk_index)
        update = (
            _chunks.update()
            .where(
                c.owner_key == sa.bindparam("k_owner"),
                c.doc_id == sa.bindparam("k_doc"),
                c.chunk_index == sa.bindparam("k_index"),
            )
            .values(tokens=sa.bindparam("k_tokens", type_=sa.Text), tsv=tsvector_of("k_words", "k_unspaced"))
        )
        rebuilt = 0
        last: tuple[Any, ...] | None = None
        with self._tx() as conn:
            while True:
                page = sa.select(c.owner_key, c.doc_id, c.chunk_index, c.text)
                if owner_key is not None:
                    page = page.where(c.owner_key == owner_key)
                if last is not None:
                    page = page.where(key > sa.tuple_(*[sa.literal(v) for v in last]))
                rows = conn.execute(page.order_by(*key.clauses).limit(REBUILD_BATCH)).all()
                if not rows:
                    break
                conn.execute(update, [_token_params(r, index_tokens(r.text)) for r in rows])
                rebuilt += len(rows)
                last = (rows[-1].owner_key, rows[-1].doc_id, rows[-1].chunk_index)
            if owner_key is None:
                conn.execute(
                    pg_insert(knowledge_meta)
                    .values(key=TOKENIZER_KEY, value=str(TOKENIZER_VERSION))
                    .on_conflict_do_update(index_elements=["key"], set_={"value": str(TOKENIZER_VERSION)})
                )
        return rebuilt


def _reset_document(conn: Connection, document: tuple[str, str, str, str, str | None], **values: Any) -> None:
    """Insert or overwrite the row of ``document`` (owner key, doc id, title, source label,
    content hash) with ``values``, and delete its chunks; the row lock serialises writers of the doc."""
    owner_key, doc_id, title, source_label, content_hash = document
    values.update(title=title, source_label=source_label, content_hash=content_hash)
    conn.execute(
        pg_insert(_docs)
        .values(owner_key=owner_key, doc_id=doc_id, **values)
        .on_conflict_do_update(index_elements=["owner_key", "doc_id"], set_=values)
    )
    conn.execute(_chunks.delete().where(_chunks.c.owner_key == owner_key, _chunks.c.doc_id == doc_id))


def _chunk_row(owner_key: str, doc_id: str, chunk: StoredChunk) -> dict[str, Any]:
    check_text(chunk.text, chunk.chunk_hash)
    embedding = chunk.embedding
    if embedding is not None:
        if not embedding or len(embedding) > MAX_DIMS:
            raise InvalidPayload(f"an embedding must have 1 to {MAX_DIMS} dimensions")
        if not all(math.isfinite(v) for v in embedding):
            raise InvalidPayload("an embedding must be finite")
    tokens = index_tokens(chunk.text)
    words, unspaced = split_tokens(tokens)
    return {
        "owner_key": owner_key,
        "doc_id": doc_id,
        "chunk_index": chunk.index,
        "chunk_hash": chunk.chunk_hash,
        "text": chunk.text,
        "tokens_in": tokens,
        "words_in": words,
        "unspaced_in": unspaced,
        "embedding": embedding,
        "dims": None if embedding is None else len(embedding),
    }


def _token_params(row: Any, tokens: str) -> dict[str, Any]:
    words, unspaced = split_tokens(tokens)
    return {
        "k_owner": row.owner_key,
        "k_doc": row.doc_id,
        "k_index": row.chunk_index,
        "k_tokens": tokens,
        "k_words": words,
        "k_unspaced": unspaced,
    }
