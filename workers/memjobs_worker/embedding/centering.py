"""Language centring of the local model's vectors: what it is and its reference text.

What: multilingual-e5-small puts a sentence near others *of its language*
before others of its meaning: asked in Chinese, it prefers a Chinese memory
about anything to the English one that answers (measured: of 24 questions
asked across languages, 10 missed the top 3 for that reason alone). Each
language's vectors share a mean; subtracting it from every vector of that
language (then normalising again) leaves what the sentence says. This is the
"centring" of Libovický et al., *On the Language Neutrality of Pre-trained
Multilingual Representations* (Findings of EMNLP 2020).

The means are not learned from anybody's data: they are the model's own
vectors of :data:`PAIRS`, everyday sentences written for this purpose, each in
English and in Chinese with the same meaning (so the two means differ by
language only), one mean per language and per side (``query:`` and
``passage:``). A text is Chinese-like when at least :data:`UNSPACED_SHARE` of
its letters belong to a script written without spaces, English-like when most
of its letters are Latin; any other text is left as the model made it.

Changing anything here changes every stored vector: bump
:data:`CENTERING_VERSION`, which is part of the model's recorded identity, so
stored vectors are re-embedded (``memjobs reembed``), never mixed.
"""

from __future__ import annotations

import unicodedata
from typing import Literal

from memjobs_worker.text import is_unspaced

#: Part of the local model's identity (:data:`memjobs_worker.embedding.local.MODEL_ID`).
CENTERING_VERSION = 1
#: A text with at least this share of unspaced-script letters is centred as Chinese.
UNSPACED_SHARE = 0.3

Language = Literal["zh", "en"]

#: Everyday sentences, each in English and Chinese. Nothing personal, nothing
#: from any test set: only the language differs within a pair.
PAIRS: tuple[tuple[str, str], ...] = (
    ("The weather is nice today.", "今天天气很好。"),
    ("Where is the nearest train station?", "最近的火车站在哪里？"),
    ("I will call you tomorrow.", "我明天给你打电话。"),
    ("The meeting was moved to the afternoon.", "会议改到下午了。"),
    ("How much does this cost?", "这个多少钱？"),
    ("She works at a hospital.", "她在医院工作。"),
    ("We watched a movie last night.", "我们昨晚看了一部电影。"),
    ("Please close the window.", "请把窗户关上。"),
    ("The children are playing in the park.", "孩子们在公园里玩。"),
    ("He forgot his keys at home.", "他把钥匙忘在家里了。"),
    ("The restaurant opens at six.", "餐厅六点开门。"),
    ("I need to buy some vegetables.", "我需要买些蔬菜。"),
    ("My phone battery is almost empty.", "我的手机快没电了。"),
    ("They moved to a new apartment.", "他们搬到了新公寓。"),
    ("The book is on the table.", "书在桌子上。"),
    ("It rained all weekend.", "整个周末都在下雨。"),
    ("Do you want to go for a walk?", "你想去散步吗？"),
    ("The train was late again.", "火车又晚点了。"),
    ("I usually get up at seven.", "我通常七点起床。"),
    ("This song reminds me of summer.", "这首歌让我想起夏天。"),
    ("What time does the shop close?", "商店几点关门？"),
    ("Our team won the game.", "我们队赢了比赛。"),
    ("The doctor said to rest for a week.", "医生说要休息一周。"),
    ("I am reading a novel about history.", "我在读一本关于历史的小说。"),
    ("Can you help me carry this box?", "你能帮我搬这个箱子吗？"),
    ("The price of rent keeps rising.", "房租一直在涨。"),
    ("He likes to cook on Sundays.", "他喜欢在周日做饭。"),
    ("The museum is closed on Mondays.", "博物馆周一闭馆。"),
    ("I lost my umbrella on the bus.", "我把伞落在公交车上了。"),
    ("We are planning a trip to the mountains.", "我们在计划去山里旅行。"),
    ("The internet is very slow today.", "今天网速很慢。"),
    ("My brother lives abroad.", "我哥哥住在国外。"),
)


def language_of(text: str) -> Language | None:
    """``"zh"`` for text mostly in scripts written without spaces, ``"en"`` for
    mostly Latin letters, ``None`` otherwise (left uncentred)."""
    letters = unspaced = latin = 0
    for ch in text:
        if unicodedata.category(ch)[0] != "L":
            continue
        letters += 1
        if is_unspaced(ch):
            unspaced += 1
        elif ch.isascii() or "LATIN" in unicodedata.name(ch, ""):
            latin += 1
    if not letters:
        return None
    if unspaced >= UNSPACED_SHARE * letters:
        return "zh"
    return "en" if latin * 2 > letters else None
