"""The hashed embedder: a test double and an explicit fallback, not the default.

The embedded default is the local model (:mod:`memjobs_worker.embedding.local`);
this one is chosen with ``MEMJOBS_LOCAL_EMBEDDER=hashing`` (the test suite does,
for speed and determinism), and knowledge then ranks by keywords alone.

No model is downloaded or called. Each text becomes a ``dims``-long vector:
character unigrams and bigrams for Chinese (which has no spaces: matched by
its characters and two-character words), lower-cased words and their
character trigrams for Latin script, each hashed with blake2b into a signed
bucket, then L2-normalised. Cosine similarity is then lexical overlap: "咖啡"
finds "我喜欢喝咖啡" and "coffee" finds "I drink coffee", but "饮料" does not
find "咖啡" and "beverage" does not find "coffee" — there is no semantics
(``docs/configuration.md``, "The offline embedder", says what that costs).

NFKC and the pairs are :mod:`memjobs_worker.text`'s, shared with knowledge
search and the grounding rule. Which characters form a run (any non-ASCII
letter or digit) and ``lower()`` rather than case folding are this module's
own, and stay as they are: the vectors of stored memories were made with them.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import unicodedata
from collections.abc import Sequence

from memjobs_worker.text import bigrams, nfkc

_LATIN_WORD = re.compile(r"[a-z0-9]+")


def _features(text: str) -> list[str]:
    """CJK (and other unspaced scripts): characters and character bigrams.
    Latin words: the word itself and its character trigrams (typos, plurals)."""
    text = nfkc(text).lower()  # lower, not fold(): the stored vectors were made so
    features: list[str] = []
    for word in _LATIN_WORD.findall(text):
        features.append(f"w:{word}")
        padded = f"^{word}$"
        features += [f"t:{padded[i : i + 3]}" for i in range(len(padded) - 2)]
    run: list[str] = []
    for char in text + " ":
        if not char.isascii() and unicodedata.category(char)[0] in "LN":
            run.append(char)
            continue
        features += [f"c:{c}" for c in run]
        features += [f"b:{pair}" for pair in bigrams(run)]
        run = []
    return features


@functools.lru_cache(maxsize=1 << 16)
def _bucket(feature: str, dims: int) -> tuple[int, float]:
    """The feature's bucket and sign (cached: words and trigrams recur, hashing was
    most of an embedding's time)."""
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest[:4], "little") % dims, 1.0 if digest[4] & 1 else -1.0


class HashingEmbedder:
    """A deterministic, model-free embedder with mem0's embedder shape."""

    def __init__(self, dims: int = 512) -> None:
        self.dims = dims

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        vector = [0.0] * self.dims
        for feature in _features(text):
            bucket, sign = _bucket(feature, self.dims)
            vector[bucket] += sign
        norm = math.sqrt(sum(v * v for v in vector))
        if norm == 0.0:
            vector[0] = 1.0
            return vector
        return [v / norm for v in vector]

    def embed_batch(self, texts: Sequence[str], memory_action: str | None = None) -> list[list[float]]:
        return [self.embed(t, memory_action) for t in texts]
