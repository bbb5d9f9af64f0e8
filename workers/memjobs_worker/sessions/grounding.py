"""Is a proposed patch the user's own words? The grounding rule of consolidation.

The seeds: automatic consolidation writes only what the user stated or asked
for, and never guesses a form of address or a reply preference. A patch is
*grounded* when all of these hold (README, "Grounding rule"):

1. **Evidence from the user.** Its ``evidence`` (at least 2 characters after
   normalisation) is a substring of one *user* turn of this session. Text is
   compared after NFKC, case folding and punctuation removal.
2. **Substance covered by the evidence.** The patch's text (``new_text`` for a
   replacement), after removing Markdown, a short leading label (``称呼：``,
   ``Name:``) and frame words (``user``, ``lives``, ``用户``, ``喜欢`` …), is cut
   into content units: English words (crudely stemmed, stop words dropped) and
   CJK bigrams (a lone CJK character counts as a unit). At least
   :data:`COVERAGE` of the units must occur in the evidence, every number in
   the patch must, and there must be at least one unit.
3. **No added stance.** A hedge (``可能``, ``probably`` …) or a negation
   (``不``, ``not`` …) in the patch must be in the evidence too, and a negation
   in the evidence must be in the patch: "I don't like coffee" never becomes
   "likes coffee".
4. **Address and reply preferences only on request.** A patch to USER.md, or
   one about how to address the user or how to reply, needs evidence that is
   an explicit request (``叫我``, ``请``, ``以后``, ``call me``, ``please``,
   ``from now on`` …).
5. **Deletions only when asked.** A replacement with empty ``new_text``
   needs evidence asking to forget or correct (``忘掉``, ``记错``, ``forget`` …).

:func:`grounded` returns ``None`` when the patch passes, else a short reason
code for the audit log (never text).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

#: Share of a patch's content units that its evidence must contain.
COVERAGE = 0.75

_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_UNIT = re.compile(rf"[{_CJK}]+|[a-z0-9]+(?:'[a-z]+)?")
_LABEL = re.compile(r"^\s*[^:：\n\d]{1,12}[:：]\s*(?=\S)")
_ELLIPSIS = re.compile(r"…+|\.{3,}")
_MARKDOWN = re.compile(r"^\s*(?:[-*+>#]+|\d+[.)])\s*|[*_`~#>\[\]()]")
_NUMBER = re.compile(r"\d+")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_IRREGULAR = {"goes": "go", "does": "do", "went": "go", "kids": "kid", "children": "child",
              "wives": "wife", "favorite": "favourite", "colour": "color"}

_STOP_EN = _words("""a an the is are was were be been being am do does did has have had of to in on at for with
by from as and or but if so than then that this these those it its they them their he she
his her him we our you your i me my mine user user's users who whom which what when where
there here also just very really quite currently now often usually sometimes would will
shall can could should may must about into onto over under up out off again still""")
_FRAME_EN = _words("""live lives living lived resides reside based like likes liked love loves enjoy enjoys
prefer prefers preferred preference preferences want wants wanted wish wishes call called
calling address addressed name named reply replies respond responds response responses
answer answers keep kept work works has have own owns give plan plans planning planned
fact facts note notes remember""")
# Frame words that still state something: "lives in X" needs evidence of living
# somewhere, not only X. A frame word of a group needs a word of its group in the evidence.
_GROUPS = (
    ({"live", "lives", "living", "lived", "resides", "reside", "based", "住", "居"},
     ("live", "lives", "living", "lived", "moved", "move", "moving", "home", "based", "reside",
      "stay", "住", "搬", "家", "居")),
    ({"like", "likes", "liked", "love", "loves", "enjoy", "enjoys", "prefer", "prefers",
      "preferred", "preference", "喜欢", "喜爱", "爱好", "偏好", "爱"},
     ("like", "likes", "love", "loves", "enjoy", "enjoys", "prefer", "prefers", "favourite",
      "favorite", "fan", "into", "喜欢", "爱", "偏好", "最", "迷")),
)
# "Is a doctor" / "是医生" claims an identity: the evidence must say "I am" / "我是" (or "当", "as").
_IDENTITY = re.compile(r"^(?:(?:the )?users? |用户)?(?:is|am|are|是)(?: |(?=[㐀-鿿]))")
_COPULAS = ("is", "am", "are", "i'm", "im", "was", "as", "是", "当", "做")
# "my friend's daughter", "同事的女儿": a fact about someone else, unless the patch names them.
_OTHERS = re.compile(r"\b(?!(?:it|that|what|there|here|let|he|she|who|where)'s\b)([a-z]+)'s\b"
                     r"|(朋友|同事|邻居|同学|别人|老板|他|她|他们)的")
_FRAME_ZH = sorted(_words("""
用户 用戶 使用者 住在 居住在 居住 生活在 家住 目前 现在 正在 已经 一直 喜欢 喜愛 喜爱 爱好 偏好 希望 想要
需要 要求 称呼 称为 叫做 回复 回答 答复 记住 记得 平时 经常 比较 非常 特别 尽量 一点 一些 一下 时
时候 不 没 别 不要 没有 稍微 有点 总是 很 是 的 了 在 有 养 和 与 及 对
我 你 他 她 它 们 为 被 把 给 从 到 也 都 就 会 要 想 请 叫
住 爱 这 那 个 只 条 位 辆 套 台 件 一 着 过 呢 吧 啊 吗 哦"""),
                   key=len, reverse=True)
_FRAME_ZH_RE = re.compile("|".join(map(re.escape, _FRAME_ZH)))
_NUMERALS = "零〇两二三四五六七八九十百千万"
# Kinship words with several everyday forms, mapped to one on both sides.
_KIN = ((re.compile("老婆|太太|爱人|媳妇"), "妻子"), (re.compile("老公|丈夫"), "丈夫"),
        (re.compile("爸爸|父亲|老爸|爸"), "父"), (re.compile("妈妈|母亲|老妈|妈"), "母"),
        (re.compile("上班|工作"), "工作"), (re.compile("孩子|小孩"), "孩子"))
_ONE_OF = re.compile("一([个只条位辆套台件本张次])")
# Numbers and times must be said: a changed number or time of day is a different fact.
_EXACT_ZH = re.compile(f"[{_NUMERALS}]|(?<![一万统唯])一(?![点些下直起样定般切致个只条位辆套台件本张次])|"
                       "早上|上午|中午|下午|晚上|傍晚|凌晨|半夜|夜里|今天|明天|昨天|后天|前天|"
                       "今年|明年|去年|周[一二三四五六日末]|星期")

_HEDGES = ("可能", "也许", "或许", "大概", "似乎", "好像", "估计", "应该是", "看起来", "看样子",
           "推测", "猜", "想必", "说不定", "probably", "maybe", "perhaps", "likely", "possibly",
           "seems", "seem", "apparently", "might", "guess", "presumably", "suppose", "perhaps")
_NEGATIONS_ZH = ("不", "没", "别", "勿", "讨厌", "拒绝")
# Words that carry a negation character without negating anything.
_NOT_NEGATIONS_ZH = re.compile("不错|不少|不过|差不多|不断|不久|特别|别人|区别|分别|告别|类别|级别|"
                               "性别|识别|没错|了不起|不得不")
_NEGATIONS_EN = {"not", "no", "never", "don't", "doesn't", "didn't", "isn't", "aren't", "wasn't",
                 "can't", "cannot", "won't", "dislike", "dislikes", "hate", "hates", "nor",
                 "without", "avoid", "avoids", "stop", "stopped", "quit"}
_ADDRESS_OR_REPLY = ("称呼", "叫我", "昵称", "名字", "叫他", "回复", "回答", "答复", "语气", "口吻",
                     "简短", "简洁", "详细", "啰嗦", "用中文", "用英文", "用英语",
                     "call me", "call the user", "address", "nickname", "reply", "replies", "answer",
                     "answers", "respond",
                     "response", "responses", "tone", "brief", "concise", "verbose", "formal",
                     "in english", "in chinese")
_REQUESTS = ("叫我", "称呼我", "喊我", "请", "一点", "一些", "点儿", "以后", "今后", "从现在", "希望你",
             "你要", "要你", "你就", "你得", "你别", "别", "不要", "记住", "记得", "帮我记", "给我", "你用",
             "用中文", "用英文", "用英语", "回答我", "回复我", "我希望", "我想让你", "我要你", "我要",
             "我想要", "麻烦", "call me", "please", "from now on", "i want", "i'd like", "i want you",
             "i'd like you", "i would like you", "i prefer", "i'd prefer", "i'd rather",
             "i would rather", "don't", "do not", "stop", "always", "never", "keep", "be", "speak",
             "give", "address me", "remember", "make sure", "can you", "could you", "you should",
             "reply in", "answer in", "talk to me", "speak to me", "use")
_FORGET = ("忘", "删", "去掉", "移除", "不再", "记错", "不对", "错了", "不是", "别记", "改成", "改为",
           "forget", "delete", "remove", "drop", "wrong", "no longer", "not anymore", "anymore",
           "don't remember", "incorrect", "mistake", "changed")


def normalise(text: str) -> str:
    """NFKC, case-folded, punctuation and symbols turned to spaces, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
    kept = [c if (c.isalnum() or c == "'") else " " for c in text]
    return " ".join("".join(kept).split())


def grounded(doc: str, text: str, evidence: str | None, user_turns: Sequence[str], *,
             deletion: bool = False) -> str | None:
    """``None`` when the patch is grounded in ``evidence`` said in ``user_turns``;
    otherwise the reason: ``not_grounded`` (evidence missing or not the user's),
    ``not_covered`` (the patch says more than the evidence), ``not_requested``
    (address, reply preference or deletion without an explicit request)."""
    parts = [normalise(p) for p in _ELLIPSIS.split(evidence or "")]
    parts = [p for p in parts if p]
    said = " ".join(parts)
    if len(said.replace(" ", "")) < 2 or not _quoted(parts, user_turns):
        return "not_grounded"
    if deletion:
        return None if _has(said, _FORGET) else "not_requested"
    content = _strip(text)
    if not _covered(content, said) or not _same_stance(content, said):
        return "not_covered"
    about_interaction = doc == "USER.md" or _has(normalise(text), _ADDRESS_OR_REPLY)
    if about_interaction and not _has(said, _REQUESTS):
        return "not_requested"
    return None


def _quoted(parts: Sequence[str], user_turns: Sequence[str]) -> bool:
    """Every part of the quote (parts split by an ellipsis) is in one user turn."""
    turns = [normalise(t) for t in user_turns]
    return all(any(part in turn for turn in turns) for part in parts)


def _strip(text: str) -> str:
    """The patch's words without Markdown, a leading label or line markers."""
    lines = []
    for line in unicodedata.normalize("NFKC", text).splitlines():
        line = _MARKDOWN.sub(" ", line)
        line = _LABEL.sub(" ", line)
        lines.append(line)
    return normalise(" ".join(lines))


def units(content: str) -> list[str]:
    """Content units of normalised text: stemmed English words and CJK bigrams."""
    out: list[str] = []
    for match in _UNIT.finditer(content):
        token = match.group()
        if token[0] >= "\u3400":
            for run in _FRAME_ZH_RE.split(token):
                out.extend(_bigrams(run))
        elif token not in _STOP_EN and token not in _FRAME_EN and token not in _NEGATIONS_EN:
            out.append(_stem(token))
    return out


def _covered(content: str, said: str) -> bool:
    content, said = _kin(content), _kin(said)
    wanted = units(content)
    if not wanted:
        return False
    words = {_stem(w) for w in _UNIT.findall(said) if not (w[0] >= "\u3400")}
    cjk = " ".join(w for w in _UNIT.findall(said) if w[0] >= "\u3400")
    hits = sum(1 for u in wanted if (_in_cjk(u, cjk) if u[0] >= "\u3400" else u in words))
    exact = (set(_NUMBER.findall(content)) <= set(_NUMBER.findall(said))
             and all(w in said for w in _EXACT_ZH.findall(content))
             # "一个" may stand for "a", but not where the evidence counted otherwise
             and not any(re.search(f"[{_NUMERALS}\\d]{m}", said) and f"一{m}" not in said
                         for m in _ONE_OF.findall(content)))
    framed = all(_has(said, needed) for frames, needed in _GROUPS if _has(content, frames))
    if _IDENTITY.match(content) and not _has(said, _COPULAS):
        return False
    for match in _OTHERS.finditer(said):
        whose = match.group(1) or match.group(2)
        if whose not in content and _stem(whose) not in units(content):
            return False
    return exact and framed and hits / len(wanted) >= COVERAGE


def _in_cjk(unit: str, cjk: str) -> bool:
    """A CJK unit is in the evidence: a lone character anywhere, a bigram with at
    most two characters between its halves ("上三年级" in "上小学三年级")."""
    if len(unit) == 1:
        return unit in cjk
    first, second = unit[0], unit[1]
    start = cjk.find(first)
    while start != -1:
        if second in cjk[start + 1:start + 4].split(" ")[0]:
            return True
        start = cjk.find(first, start + 1)
    return False


def _kin(text: str) -> str:
    for pattern, canonical in _KIN:
        text = pattern.sub(canonical, text)
    return text


def _same_stance(content: str, said: str) -> bool:
    for hedge in _HEDGES:
        if _has(content, (hedge,)) and not _has(said, (hedge,)):
            return False
    return _negated(content) == _negated(said)


def _negated(text: str) -> bool:
    words = set(text.split())
    text = _NOT_NEGATIONS_ZH.sub(" ", text)
    return bool(words & _NEGATIONS_EN) or any(n in text for n in _NEGATIONS_ZH)


def _has(text: str, needles: Iterable[str]) -> bool:
    """Whether a needle occurs: CJK anywhere, English only as whole words."""
    padded = f" {text} "
    for needle in needles:
        if needle[0] >= "\u3400":
            if needle in text:
                return True
        elif f" {needle} " in padded:
            return True
    return False


def _bigrams(run: str) -> list[str]:
    if len(run) <= 1:
        return [run] if run else []
    return [run[i:i + 2] for i in range(len(run) - 1)]


def _stem(word: str) -> str:
    """A crude English stem, applied to patch and evidence alike ("moved"/"moving" → "mov")."""
    word = _IRREGULAR.get(word, word).removesuffix("'s").replace("'", "")
    for suffix, keep in (("ies", 3), ("ing", 4), ("ed", 3), ("es", 4), ("s", 3), ("ic", 4),
                         ("y", 4)):
        if word.endswith(suffix) and len(word) - len(suffix) >= keep and not word.endswith("ss"):
            return word[: len(word) - len(suffix)] + ("y" if suffix == "ies" else "")
    return word
