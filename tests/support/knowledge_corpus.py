"""A small labelled corpus (Chinese and English) and queries with the document
each should find: the knowledge quality check (recall@5) runs on it."""

from __future__ import annotations

from collections.abc import Callable

DOCS: dict[str, tuple[str, str]] = {
    "tea": (
        "乌龙茶冲泡笔记",
        "乌龙茶适合用九十五度左右的水冲泡。第一泡洗茶，时间要短。之后每泡延长十秒。"
        "铁观音和大红袍都属于乌龙茶，香气浓郁，回甘明显。",
    ),
    "hangzhou": (
        "杭州周末路线",
        "周六上午去西湖边散步，从断桥走到苏堤。中午在河坊街吃片儿川。下午去灵隐寺，傍晚回到湖滨看音乐喷泉。",
    ),
    "allergy": ("过敏与饮食", "我对花生过敏，外出吃饭要提前告诉服务员。坚果类零食都要看配料表。随身带着抗过敏药。"),
    "bike": (
        "Bicycle maintenance",
        "Clean and lubricate the chain every two weeks. Check tyre pressure "
        "before long rides. Replace brake pads when the groove is gone.",
    ),
    "sourdough": (
        "Sourdough starter",
        "Feed the starter with equal weights of flour and water. Keep it at "
        "room temperature and discard half before each feeding. Bake when it doubles in four hours.",
    ),
    "taxes": (
        "Tax checklist",
        "Collect the annual income statements, the receipts for medical expenses "
        "and the mortgage interest certificate before filing in March.",
    ),
    "piano": ("钢琴练习计划", "每天练习音阶二十分钟，然后练习肖邦的夜曲。每周录一次音，对比节奏和力度。"),
    "garden": (
        "Balcony garden",
        "Tomatoes need six hours of sun. Water basil in the morning. Repot the rosemary in spring with a sandy soil.",
    ),
    "running": ("跑步训练", "周二和周四做间歇跑，周末长距离慢跑十五公里。跑前热身，跑后拉伸小腿和大腿。"),
    "japan": (
        "Kyoto trip",
        "Book the ryokan near Gion. Visit Fushimi Inari early in the morning to avoid "
        "crowds. Buy a bus day pass for the temples.",
    ),
    "cat": ("猫咪照顾", "猫粮每天两次，每次四十克。每年打一次疫苗，每三个月驱虫一次。猫砂每天清理。"),
    "meeting": (
        "Weekly team meeting",
        "The team meets on Wednesday at ten. Bring the status of the migration "
        "project and the list of blocked tickets.",
    ),
}

QUERIES: list[tuple[str, str]] = [
    ("乌龙茶用多少度的水", "tea"),
    ("铁观音", "tea"),
    ("西湖散步路线", "hangzhou"),
    ("灵隐寺", "hangzhou"),
    ("花生过敏", "allergy"),
    ("chain lubrication", "bike"),
    ("brake pads", "bike"),
    ("feed the starter", "sourdough"),
    ("medical expenses receipts", "taxes"),
    ("肖邦夜曲", "piano"),
    ("basil watering", "garden"),
    ("间歇跑", "running"),
    ("Fushimi Inari", "japan"),
    ("猫粮", "cat"),
    ("驱虫", "cat"),
    ("migration project status", "meeting"),
]


def recall_at(k: int, search: Callable[[str, int], list[str]]) -> float:
    """Share of QUERIES whose expected document is among the top ``k`` results.

    ``search(query, k)`` returns the document ids of the results, best first.
    """
    hits = sum(1 for query, expected in QUERIES if expected in search(query, k)[:k])
    return hits / len(QUERIES)


# --- ranking with distractors ---------------------------------------------------------
#
# Long diary-like documents, in both languages, full of stop words ("the", "to",
# "on"; 的, 了, 我们) and of words the queries use in passing (water, morning,
# chain of events; 水, 早上, 周末). A ranking that counts stop words, or lets one long
# document fill the top results with its chunks, puts them above the right note.

_EN_DIARY = [
    "I went to the shop on the corner and then I came back to the house.",
    "It was one of those days when the weather could not make up its mind.",
    "We talked for a long time about the things that we wanted to do in the spring.",
    "In the morning I had a cup of coffee and looked at the news on my phone.",
    "There is always something to do on the weekend, and it is never the thing you planned.",
    "My neighbour told me that the water in the building would be off for an hour.",
    "I should write to my sister, but I keep putting it off until the end of the week.",
    "The train was late again, so I was late to the office, and the day went on like that.",
    "After lunch we walked to the park and sat on a bench for a while in the sun.",
    "It is strange how a chain of small events can change the whole mood of a day.",
    "I was thinking about what to cook for dinner and ended up ordering something.",
    "The kids were on their bikes in the street until it got dark outside.",
    "On the way home I stopped to buy bread, and of course they had run out of it.",
    "We have been meaning to sort out the garage for months, and it is still a mess.",
    "The meeting at school was about the trip, the money, and who would drive.",
    "I read a few pages of the book before bed, but I could not keep my eyes open.",
]
_ZH_DIARY = [
    "今天早上起得很晚，吃了早饭以后就出门了。",
    "我们在路上聊了很多事情，也说到了以后的打算。",
    "下午的天气不太好，一直在下小雨，所以就待在家里了。",
    "晚上和朋友一起吃了饭，大家都很开心。",
    "最近的工作有点忙，每天都要开好几个会。",
    "周末本来想出去走走，结果还是在家里休息了。",
    "我觉得这件事情还是要慢慢来，不能太着急。",
    "楼里今天停水了一个小时，大家都在等。",
    "妈妈打电话来问我最近过得怎么样。",
    "路上的车很多，到公司的时候已经迟到了。",
    "买了一些水果和蔬菜，准备这几天自己做饭。",
    "看了一会儿书，又看了一会儿手机，时间就过去了。",
    "孩子们在楼下玩到天黑才回家。",
    "我们说好了下个月一起去看电影。",
    "今天的心情还不错，虽然事情很多。",
    "睡觉之前喝了一杯热水，希望明天早点起床。",
]


def _diary(sentences: list[str], n: int, seed: int, sep: str) -> str:
    import random

    rng = random.Random(seed)
    return sep.join(rng.choice(sentences) for _ in range(n))


DISTRACTORS: dict[str, tuple[str, str]] = {
    "diary-en-1": ("Diary, spring", _diary(_EN_DIARY, 90, 1, " ")),
    "diary-en-2": ("Diary, autumn", _diary(_EN_DIARY, 90, 2, " ")),
    "diary-zh-1": ("日记（春）", _diary(_ZH_DIARY, 300, 3, "")),
    "diary-zh-2": ("日记（秋）", _diary(_ZH_DIARY, 300, 4, "")),
}

#: Queries as people phrase them, stop words included, with the document each should find.
NATURAL_QUERIES: list[tuple[str, str]] = [
    ("how often should I lubricate the chain on my bike", "bike"),
    ("when do I need to replace the brake pads", "bike"),
    ("what is the right water temperature for the oolong tea", "tea"),
    ("how do I feed the starter before baking", "sourdough"),
    ("what do I have to collect before filing the taxes", "taxes"),
    ("how many hours of sun do the tomatoes need", "garden"),
    ("when should I water the basil", "garden"),
    ("where is the ryokan that we booked in Kyoto", "japan"),
    ("what time does the team meet on Wednesday", "meeting"),
    ("what should I bring to the weekly meeting", "meeting"),
    ("周末去西湖的路线是什么", "hangzhou"),
    ("我对什么过敏", "allergy"),
    ("猫每天吃多少猫粮", "cat"),
    ("每天练习音阶多长时间", "piano"),
    ("周末长距离慢跑多少公里", "running"),
    ("乌龙茶第一泡要注意什么", "tea"),
]

#: Every query of the ranking figures: the labelled ones and the natural ones.
RANKING_QUERIES: list[tuple[str, str]] = QUERIES + NATURAL_QUERIES


def top_k_share(k: int, queries: list[tuple[str, str]], search: Callable[[str, int], list[str]]) -> float:
    """Share of ``queries`` whose expected document is among the first ``k`` results."""
    hits = sum(1 for query, expected in queries if expected in search(query, k)[:k])
    return hits / len(queries)


# --- paraphrased and cross-lingual questions (issue 24) ------------------------------
#
# Questions about the notes of DOCS asked in the other language (or in other words),
# sharing no word or Chinese character pair with the note they should find: keywords
# alone cannot find them; a multilingual embedding model can.

CROSSLINGUAL_QUERIES: list[tuple[str, str]] = [
    ("How hot should the water be for brewing oolong?", "tea"),
    ("What am I allergic to?", "allergy"),
    ("Which temple do we visit in the afternoon in Hangzhou?", "hangzhou"),
    ("How much food does the cat get each day?", "cat"),
    ("On which days do I do interval training?", "running"),
    ("What should I practise on the piano every day?", "piano"),
    ("自行车链条多久上一次油？", "bike"),
    ("面包酵种怎么喂？", "sourdough"),
    ("报税之前要准备哪些材料？", "taxes"),
    ("阳台上的番茄需要晒几个小时太阳？", "garden"),
    ("去京都旅行要订哪里的旅馆？", "japan"),
    ("团队例会是星期几？", "meeting"),
]
