"""A small labelled corpus (Chinese and English) and queries with the document
each should find: the knowledge quality check (recall@5) runs on it."""

from __future__ import annotations

from collections.abc import Callable

DOCS: dict[str, tuple[str, str]] = {
    "tea": ("乌龙茶冲泡笔记", "乌龙茶适合用九十五度左右的水冲泡。第一泡洗茶，时间要短。之后每泡延长十秒。"
            "铁观音和大红袍都属于乌龙茶，香气浓郁，回甘明显。"),
    "hangzhou": ("杭州周末路线", "周六上午去西湖边散步，从断桥走到苏堤。中午在河坊街吃片儿川。"
                 "下午去灵隐寺，傍晚回到湖滨看音乐喷泉。"),
    "allergy": ("过敏与饮食", "我对花生过敏，外出吃饭要提前告诉服务员。坚果类零食都要看配料表。"
                "随身带着抗过敏药。"),
    "bike": ("Bicycle maintenance", "Clean and lubricate the chain every two weeks. Check tyre pressure "
             "before long rides. Replace brake pads when the groove is gone."),
    "sourdough": ("Sourdough starter", "Feed the starter with equal weights of flour and water. Keep it at "
                  "room temperature and discard half before each feeding. Bake when it doubles in four hours."),
    "taxes": ("Tax checklist", "Collect the annual income statements, the receipts for medical expenses "
              "and the mortgage interest certificate before filing in March."),
    "piano": ("钢琴练习计划", "每天练习音阶二十分钟，然后练习肖邦的夜曲。每周录一次音，对比节奏和力度。"),
    "garden": ("Balcony garden", "Tomatoes need six hours of sun. Water basil in the morning. Repot the "
               "rosemary in spring with a sandy soil."),
    "running": ("跑步训练", "周二和周四做间歇跑，周末长距离慢跑十五公里。跑前热身，跑后拉伸小腿和大腿。"),
    "japan": ("Kyoto trip", "Book the ryokan near Gion. Visit Fushimi Inari early in the morning to avoid "
              "crowds. Buy a bus day pass for the temples."),
    "cat": ("猫咪照顾", "猫粮每天两次，每次四十克。每年打一次疫苗，每三个月驱虫一次。猫砂每天清理。"),
    "meeting": ("Weekly team meeting", "The team meets on Wednesday at ten. Bring the status of the migration "
                "project and the list of blocked tickets."),
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
