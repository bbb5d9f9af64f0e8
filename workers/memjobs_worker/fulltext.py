"""Tokens for PostgreSQL full-text search that also find Chinese.

Used by knowledge search and by personal recall's keyword ranking (mem0 keeps
each memory's :func:`index_tokens` as its keyword form: see
:mod:`memjobs_worker.memory.engine.fused_search`), so they live below both.

What: :func:`index_tokens` turns a chunk into a space-joined token string that
PostgreSQL's ``simple`` text-search configuration indexes as it is;
:func:`query_tokens` turns a query into the tokens to look for.

Why: PostgreSQL's parser splits text only at spaces and punctuation, so a
Chinese sentence would become one huge "word" no query matches. Instead, text
in scripts written without spaces (Han, kana, Hangul, Thai, Lao, Khmer,
Myanmar, Tibetan, Yi) is indexed as every character and every adjacent pair of
characters ("花生过敏" → 花 生 过 敏 花生 生过 过敏), and a query looks for
its pairs: a two-character word matches wherever it occurs. Other words
(Latin, Cyrillic, digits...) are kept whole. Both sides first apply NFKC and
case folding, so full-width "ＡＢＣ" finds "abc".

A "character" here is a cluster (a base and its combining marks); format
characters such as the zero-width joiner and variation selectors are dropped.
Words longer than :data:`MAX_TOKEN_CHARS` are dropped on both sides.

The two kinds of token are then indexed differently (:func:`split_tokens`):
words through PostgreSQL's ``english`` configuration (Snowball stemming, so
"lubricate" finds "lubricated", and English stop words dropped, so "the", "to"
and "on" neither match nor weigh), the characters and bigrams through
``simple``, as they are. Queries do the same, token by token.

The folding, the unspaced scripts and the pairs are :mod:`memjobs_worker.text`'s,
shared with the hashed embedder and the grounding rule; the splitting into runs
is this module's. Bump :data:`TOKENIZER_VERSION` whenever the output changes for
any input (here or there): the store then reports its index stale and rebuilds
it from the raw chunk text.
"""

from __future__ import annotations

import unicodedata

from memjobs_worker.text import bigrams, fold, grams, is_invisible, is_unspaced

#: The version of the tokens this module produces (stored in ``knowledge_meta``).
TOKENIZER_VERSION = 2
#: Longer words are not indexed (PostgreSQL itself ignores lexemes over 2 KB).
MAX_TOKEN_CHARS = 100


def index_tokens(text: str) -> str:
    """The space-joined tokens to index for ``text``.

    Each unspaced run contributes its characters, then its adjacent pairs;
    each other word contributes itself.
    """
    tokens: list[str] = []
    for kind, units in _runs(text):
        if kind == "word":
            tokens.append("".join(units))
        else:
            tokens.extend(units)
            tokens.extend(bigrams(units))
    return " ".join(tokens)


def query_tokens(query: str) -> list[str]:
    """The distinct tokens to look for, in query order.

    An unspaced run of two or more characters gives its adjacent pairs (every
    pair is indexed, so this finds the run wherever it occurs); a run of one
    gives that character; each other word gives itself.
    """
    tokens: list[str] = []
    for kind, units in _runs(query):
        if kind == "word":
            tokens.append("".join(units))
        else:
            tokens.extend(grams(units))
    return list(dict.fromkeys(tokens))


def split_tokens(tokens: str) -> tuple[str, str]:
    """The words and the unspaced-script tokens of an :func:`index_tokens` string,
    each space-joined: the first goes to the ``english`` configuration, the
    second to ``simple``."""
    words: list[str] = []
    unspaced: list[str] = []
    for token in tokens.split():
        (unspaced if is_unspaced_token(token) else words).append(token)
    return " ".join(words), " ".join(unspaced)


def is_unspaced_token(token: str) -> bool:
    """True for a character or bigram of a script written without spaces."""
    return bool(token) and is_unspaced(token[0])


def is_searchable(token: str) -> bool:
    """True for a query token worth a full-text lookup.

    A lone character of an unspaced script is a word in its own right (花);
    a lone Latin letter or digit would match nearly everything, so queries
    made only of those fall back to a substring search instead.
    """
    return len(token) >= 2 or (len(token) == 1 and is_unspaced(token))


def _runs(text: str) -> list[tuple[str, list[str]]]:
    """Split folded text into ("word", chars) and ("unspaced", clusters) runs."""
    runs: list[tuple[str, list[str]]] = []
    kind = ""
    units: list[str] = []

    def flush() -> None:
        nonlocal kind, units
        if units and not (kind == "word" and len(units) > MAX_TOKEN_CHARS):
            runs.append((kind, units))
        kind, units = "", []

    for ch in fold(text):
        if is_invisible(ch):
            continue  # joiners, selectors, soft hyphens
        category = unicodedata.category(ch)
        if category[0] == "M":
            if units:
                units[-1] += ch  # a combining mark belongs to its base
            continue
        if category[0] == "L" and is_unspaced(ch):
            new_kind = "unspaced"
        elif category[0] in "LN":
            new_kind = "word"
        else:
            flush()
            continue
        if new_kind != kind:
            flush()
            kind = new_kind
        units.append(ch)
    flush()
    return runs
