"""Recall that understands, on the embedded default (issue 24): with no model
service, the local model plus keyword fusion finds memories asked about in other
words or in the other language.

The set (``tests/data/recall_bilingual.json``): 24 personal facts in Chinese
and English, 36 questions that paraphrase them or ask in the other language.
The facts are remembered through the producer client and learned by a real
worker thread on real Redis, PostgreSQL and mem0 (verbatim, no chat model),
then each question is asked through :class:`PersonalMemory.recall`, the path
``/v1/recall`` takes. One module-scoped stack: the model loads once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from memjobs_client.contracts import owner_key
from memjobs_worker.settings import Settings
from tests.support.harness import REPO, Harness

SET = json.loads((REPO / "tests" / "data" / "recall_bilingual.json").read_text(encoding="utf-8"))
OWNER = "quality@example.com"
KEY = owner_key(OWNER)

# The aim, on this set (docs/embeddings.md has the measured figures).
MIN_TOP3 = 0.90
MIN_TOP1 = 0.75


def ranks(h: Harness, memory_of: dict[str, str]) -> list[tuple[dict[str, Any], list[str]]]:
    """Each question with the fact ids of its top-3 recalled memories."""
    out = []
    for question in SET["questions"]:
        hits = h.runtime.personal_memory.recall(KEY, question["q"], 3)
        out.append((question, [memory_of.get(hit.text, "?") for hit in hits]))
    return out


def test_paraphrased_crosslingual_and_exact_questions_find_their_memory(
    make_settings: Callable[..., Settings],
    harness_factory: Callable[[Settings], Harness],
) -> None:
    """One stack for every check: the model loads once."""
    from memjobs_worker.embedding.local import MODEL_ID

    h = harness_factory(make_settings(local_embedder="e5"))
    h.start_worker()
    for fact in SET["facts"]:
        h.client.remember(OWNER, fact["text"])
    h.drain()
    memory_of = {fact["text"]: fact["id"] for fact in SET["facts"]}

    results = ranks(h, memory_of)
    top1 = [q for q, got in results if got[:1] and got[0] in {q["fact"], *q.get("also", [])}]
    top3 = [q for q, got in results if {q["fact"], *q.get("also", [])} & set(got)]
    missed = [(q["q"], got) for q, got in results if q not in top3]
    assert len(top3) >= MIN_TOP3 * len(results), f"top-3 {len(top3)}/{len(results)}; missed {missed}"
    assert len(top1) >= MIN_TOP1 * len(results), f"top-1 {len(top1)}/{len(results)}"
    for kind in ("paraphrase", "crosslingual"):  # each kind holds on its own, not only on average
        asked = [q for q, _ in results if q["kind"] == kind]
        found = [q for q in top3 if q["kind"] == kind]
        assert len(found) >= MIN_TOP3 * len(asked), (kind, len(found), len(asked))

    # The keyword ranking: a name, a number, an exact phrase come first.
    for query, fact in (("馒头", "cat"), ("Corolla", "car"), ("2019", "marathon"), ("O型", "blood")):
        hits = h.runtime.personal_memory.recall(KEY, query, 3)
        assert hits and memory_of[hits[0].text] == fact, (query, [x.text for x in hits])

    with h.runtime.db.connect() as conn:
        row = conn.execute(sa.text("SELECT model, dims FROM embedding_models WHERE space = 'memory'")).one()
    assert (row.model, row.dims) == (MODEL_ID, 384)
