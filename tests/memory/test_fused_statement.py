"""Recall reads the nearness and the keywords of an owner's memories in one statement:
the same rows, cosines and keyword weights as the two statements it replaces, the
question's vector sent in pgvector's binary form."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from memjobs_client.contracts import owner_key, source_id_for
from memjobs_worker.db.connect import libpq_url
from memjobs_worker.memory.engine import HashingEmbedder
from memjobs_worker.memory.engine.fused_search import (
    BinaryVector,
    keyword_weights,
    nearness_and_keywords,
    similarities,
)
from tests.support.ledger import hashing_mem0_engine, pending_source

DIMS = 64
TABLE = f"mem0_memories_{DIMS}"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY = owner_key("the-owner")
MEMORIES = [
    "[1:56 pm on 8 May, 2023] Caroline: I went to the LGBTQ support group yesterday",
    "[1:57 pm on 8 May, 2023] Melanie: Have you been painting lately?",
    "[1:58 pm on 8 May, 2023] Caroline: Yes, that sunrise last year",
    "I am allergic to peanuts",
    "我对花生过敏",
    "我的猫叫小白, it is a white cat",
    "The wifi password is on the fridge",
]
QUESTIONS = [
    "What did Caroline paint?",
    "what am I allergic to?",
    "我对什么过敏",
    "猫 white",
    "the of and",  # stop words only: weigh nothing
    "a b c",  # no searchable token: nearness alone
    "quantum chromodynamics",  # tokens no memory holds
]


@pytest.fixture
def stored(database_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    engine = hashing_mem0_engine(database_url, tmp_path, DIMS)
    batch = [pending_source(KEY, text, T0, source_id=source_id_for(KEY, str(n))) for n, text in enumerate(MEMORIES)]
    other = owner_key("another-owner")
    engine.extract(KEY, uuid.uuid4().hex, batch)
    engine.extract(other, uuid.uuid4().hex, [pending_source(other, MEMORIES[3], T0)])
    try:
        yield engine
    finally:
        engine.close()


@pytest.mark.parametrize("question", QUESTIONS)
def test_one_statement_reads_what_the_two_did(stored, database_url: str, question: str) -> None:  # type: ignore[no-untyped-def]
    vector = HashingEmbedder(DIMS).embed(question, "search")
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        memories, held, whole = nearness_and_keywords(conn, TABLE, KEY, question, vector)
        assert memories == similarities(conn, TABLE, KEY, vector)
        assert (held, whole) == keyword_weights(conn, TABLE, KEY, question)
        # The cosines are those of the vector sent as text, as before.
        text_form = conn.execute(
            f"SELECT id::text, 1 - (vector <=> %s::vector) FROM {TABLE} WHERE payload->>'user_id' = %s",  # noqa: S608
            ("[" + ",".join(map(str, vector)) + "]", KEY),
        ).fetchall()
    assert len(memories) == len(MEMORIES)
    assert {m.memory_id: m.score for m in memories} == pytest.approx(dict(text_form), abs=1e-6)
    if question in ("the of and", "a b c", "quantum chromodynamics"):
        assert (held, whole) == ({}, 0.0)
    else:
        assert held and whole > 0


def test_the_binary_form_is_pgvectors(database_url: str) -> None:
    vector = [0.5, -1.25, 3.0, 1e-3]
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        (text,) = conn.execute("SELECT %b::vector::text", (BinaryVector.of(vector),)).fetchone()  # type: ignore[misc]
    assert text == "[0.5,-1.25,3,0.001]"
