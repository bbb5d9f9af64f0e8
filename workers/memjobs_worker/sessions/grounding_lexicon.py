"""The word lists and patterns of the grounding rule (:mod:`~memjobs_worker.sessions.grounding`).

Kept apart so the rule reads as rules; every list here is a small, general
vocabulary (frame words, negations, hedges, request markers), not a list of
the cases the rule was measured on.
"""

from __future__ import annotations

import re

from memjobs_worker.text import HAN

UNIT = re.compile(rf"[{HAN}]+|[a-z0-9]+(?:'[a-z]+)?")
LABEL = re.compile(r"^\s*[^:：\n\d]{1,12}[:：]\s*(?=\S)")
ELLIPSIS = re.compile(r"…+|\.{3,}")
MARKDOWN = re.compile(r"^\s*(?:[-*+>#]+|\d+[.)])\s*|[*_`~#>\[\]()]")
NUMBER = re.compile(r"\d+")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


IRREGULAR = {
    "goes": "go",
    "does": "do",
    "went": "go",
    "kids": "kid",
    "children": "child",
    "wives": "wife",
    "favorite": "favourite",
    "colour": "color",
}

STOP_EN = _words("""a an the is are was were be been being am do does did has have had of to in on at for with
by from as and or but if so than then that this these those it its they them their he she
his her him we our you your i me my mine user user's users who whom which what when where
there here also just very really quite currently now often usually sometimes would will
shall can could should may must about into onto over under up out off again still""")
FRAME_EN = _words("""live lives living lived resides reside based like likes liked love loves enjoy enjoys
prefer prefers preferred preference preferences want wants wanted wish wishes call called
calling address addressed name named reply replies respond responds response responses
answer answers keep kept work works has have own owns give plan plans planning planned
fact facts note notes remember""")
# Frame words that still state something: "lives in X" needs evidence of living
# somewhere, not only X. A frame word of a group needs a word of its group in the evidence.
GROUPS = (
    (
        "live",
        _words("live lives living lived resides reside based 住 居"),
        _words("live lives living lived moved move moving home based reside stay 住 搬 家 居"),
    ),
    (
        "work",
        _words("work works working 工作"),
        _words("work works working job employed shift shifts career as 工作 当 职"),
    ),
    (
        "like",
        _words("like likes liked love loves enjoy enjoys prefer prefers preferred preference 喜欢 喜爱 爱好 偏好 爱"),
        _words("like likes love loves enjoy enjoys prefer prefers favourite favorite fan into 喜欢 爱 偏好 最 迷"),
    ),
)
# "Is a doctor" / "是医生" claims an identity: the evidence must say "I am" / "我是" (or "当", "as").
IDENTITY = re.compile(r"^(?:(?:the )?users? |用户)?(?:(?:is|am|are) an? |是(?=[\u3400-\u9fff]))")
COPULAS = ("is", "am", "are", "i'm", "im", "we're", "was", "as", "是", "当", "做")
# "The user's name is X" / "用户叫X": only from the user naming themselves.
NAME_CLAIM = re.compile(r"^(?:(?:the )?(?:user's|users?) |用户(?:的)?)?(?:name (?:is )?|名字|叫)")
NAMING = ("my name", "i'm", "i am", "call me", "name is", "我叫", "我是", "名字", "叫我", "称呼我")
# "my dad is diabetic", "同事有女朋友了": the evidence is about someone else; the patch must name them.
PERSONS_EN = _words("""friend dad father mom mum mother brother sister son daughter wife husband boyfriend girlfriend
partner colleague coworker boss neighbor neighbour cousin uncle aunt grandma grandpa
grandmother grandfather kid child baby roommate classmate""")
PERSON_ZH = re.compile(
    "^(?:我们的|我的|我们|我)?(朋友|爸|妈|父|母|哥|姐|弟|妹|老婆|老公|太太|"
    "表[哥姐弟妹]|堂[哥姐弟妹]|儿子|女儿|"
    "妻子|丈夫|男朋友|女朋友|同事|老板|邻居|叔|伯|姨|舅|姑|爷爷|奶奶|外公|外婆|孩子|"
    "同学|室友)"
)
# "my friend's daughter", "同事的女儿": a fact about someone else, unless the patch names them.
OTHERS = re.compile(
    r"\b(?!(?:it|that|what|there|here|let|he|she|who|where)'s\b)([a-z]+)'s\b"
    r"|(朋友|同事|邻居|同学|别人|老板|他|她|他们)的"
)
FRAME_ZH = sorted(
    _words("""
用户 用戶 使用者 住在 居住在 居住 生活在 家住 目前 现在 正在 已经 一直 喜欢 喜愛 喜爱 爱好 偏好 计划 打算
准备 叫作 称作 被叫 被叫作 被称为 希望 想要 需要 要求 称呼 称为 叫做 回复 回答 答复 记住 记得 平时 经常
比较 非常 特别 尽量 一点 一些 一下 时 时候 不 没 别 不要 没有 稍微 有点 总是 很 是 的
了 在 有 养 和 与 及 对 我 你 他 她 它 们 为 被 把 给 从 到
也 都 就 会 要 想 请 叫 住 爱 这 那 个 只 条 位 辆 套 台 件
一 着 过 呢 吧 啊 吗 哦"""),
    key=len,
    reverse=True,
)
FRAME_ZH_RE = re.compile("|".join(map(re.escape, FRAME_ZH)))
NUMERALS = "零〇两二三四五六七八九十百千万"
ZH_DIGITS = {c: i for i, c in enumerate("零一二三四五六七八九十")} | {"〇": 0, "两": 2}
# A run of numerals before a unit: 三号, 十二月, 两个 (but 一点 is "a bit", not 1 o'clock).
ZH_NUMBER = re.compile(
    "(?<![零〇一二两三四五六七八九十])([零〇一二两三四五六七八九十]{1,3})(?=[月日号岁点个位只条次天周年])"
)
EN_NUMBERS = {
    w: str(i)
    for i, w in enumerate(
        ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
    )
}
# Kinship words with several everyday forms, mapped to one on both sides.
KIN = (
    (re.compile("老婆|太太|爱人|媳妇"), "妻子"),
    (re.compile("老公|丈夫"), "丈夫"),
    (re.compile("爸爸|父亲|老爸|爸"), "父"),
    (re.compile("妈妈|母亲|老妈|妈"), "母"),
    (re.compile("上班|工作"), "工作"),
    (re.compile("孩子|小孩"), "孩子"),
    (re.compile("号"), "日"),
)
ONE_OF = re.compile("一([个只条位辆套台件本张次])")
# Numbers and times must be said: a changed number or time of day is a different fact.
EXACT_ZH = re.compile(
    f"[{NUMERALS}]|(?<![一万统唯])一(?![点些下直起样定般切致个只条位辆套台件本张次])|"
    "早上|上午|中午|下午|晚上|傍晚|凌晨|半夜|夜里|今天|明天|昨天|后天|前天|"
    "今年|明年|去年|周[一二三四五六日末]|星期"
)

HEDGES = (
    "可能",
    "也许",
    "或许",
    "大概",
    "似乎",
    "好像",
    "估计",
    "应该是",
    "看起来",
    "看样子",
    "推测",
    "猜",
    "想必",
    "说不定",
    "probably",
    "maybe",
    "perhaps",
    "likely",
    "possibly",
    "seems",
    "seem",
    "apparently",
    "might",
    "guess",
    "presumably",
    "suppose",
    "perhaps",
)
NEGATIONS_ZH = ("不", "没", "别", "勿", "讨厌", "拒绝")
# Words that carry a negation character without negating anything.
NOT_NEGATIONS_ZH = re.compile(
    "不错|不少|不过|差不多|不断|不久|特别|别人|区别|分别|告别|类别|级别|性别|识别|没错|了不起|不得不"
)
NEGATIONS_EN = {
    "not",
    "no",
    "never",
    "don't",
    "doesn't",
    "didn't",
    "isn't",
    "aren't",
    "wasn't",
    "can't",
    "cannot",
    "won't",
    "dislike",
    "dislikes",
    "hate",
    "hates",
    "nor",
    "without",
    "avoid",
    "avoids",
    "stop",
    "stopped",
    "quit",
}
# A patch about how to address the user, or how to reply to them.
ADDRESS = (
    "称呼",
    "叫我",
    "昵称",
    "叫他",
    "叫她",
    "被叫",
    "喊我",
    "call me",
    "call the user",
    "be called",
    "address",
    "addressed",
    "nickname",
    "refer to",
)
REPLY = (
    "回复",
    "回答",
    "答复",
    "语气",
    "口吻",
    "说话",
    "简短",
    "简洁",
    "详细",
    "啰嗦",
    "用中文",
    "用英文",
    "用英语",
    "reply",
    "replies",
    "answer",
    "answers",
    "respond",
    "response",
    "responses",
    "tone",
    "brief",
    "concise",
    "verbose",
    "formal",
    "in english",
    "in chinese",
    "talk",
    "speak",
)
# An explicit request to be addressed some way, or words of address in a request.
ADDRESS_REQUESTS = ("叫我", "称呼我", "喊我", "管我叫", "call me", "address me", "refer to me")
ADDRESS_WORDS = ("称呼", "叫", "喊", "昵称", "call", "address", "nickname", "name")
# A stated reply preference: "I prefer short answers", "我喜欢你说话简短".
PREFERS = (
    "i prefer",
    "i like",
    "i love",
    "i'd rather",
    "i want",
    "我喜欢",
    "我更喜欢",
    "我希望",
    "我习惯",
    "我想要",
    "我偏好",
)
REQUESTS = (
    "叫我",
    "称呼我",
    "喊我",
    "请",
    "一点",
    "一些",
    "点儿",
    "以后",
    "今后",
    "从现在",
    "希望你",
    "你要",
    "要你",
    "你就",
    "你得",
    "你别",
    "别",
    "不要",
    "记住",
    "记得",
    "帮我记",
    "给我",
    "你用",
    "用中文",
    "用英文",
    "用英语",
    "回答我",
    "回复我",
    "我希望",
    "我想让你",
    "我要你",
    "我要",
    "我想要",
    "麻烦",
    "call me",
    "please",
    "from now on",
    "i want",
    "i'd like",
    "i want you",
    "i'd like you",
    "i would like you",
    "i prefer",
    "i'd prefer",
    "i'd rather",
    "i would rather",
    "don't",
    "do not",
    "stop",
    "always",
    "never",
    "keep",
    "be",
    "speak",
    "give",
    "address me",
    "remember",
    "make sure",
    "can you",
    "could you",
    "you should",
    "reply in",
    "answer in",
    "talk to me",
    "speak to me",
    "use",
)
FORGET = (
    "忘",
    "删",
    "去掉",
    "移除",
    "不再",
    "记错",
    "不对",
    "错了",
    "不是",
    "别记",
    "改成",
    "改为",
    "forget",
    "delete",
    "remove",
    "drop",
    "wrong",
    "no longer",
    "not anymore",
    "anymore",
    "don't remember",
    "incorrect",
    "mistake",
    "changed",
)
