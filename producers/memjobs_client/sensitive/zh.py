"""Chinese disclosure rules: 密码是123456, 密码改成了 Abc@2024, 口令为 8866.

What: a keyword (密码, 口令, 密钥, 验证码, ...), an optional adverb and
connector (是, 为, 改成了, 设为, 设置成, ...) and a value (digits, Chinese
numerals, ASCII, or anything quoted); also the value first ("123456 是我的
银行卡密码").  "密码是2024年改的", "密码是什么", 密码学 pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from memjobs_client.sensitive.values import at_clause_end, is_filler, value_core, value_span

_ZH_KEYWORD = re.compile(
    r"(?:暗号|密码|密碼|口令|密钥|密鑰|私钥|私鑰|秘钥|秘鑰|令牌|验证码|驗證碼|校验码|校驗碼|动态码|動態碼|安全码"
    r"|授权码|授權碼|短信码|确认码|登录码|登陆码|激活码|解锁码|开门码|PIN码|PIN碼|pin码)",
    re.IGNORECASE,
)
_ZH_UNITS = "年月日号號位个個次天点點分秒岁歲块塊元万萬千百十条條遍字到至"
_ZH_NUMERALS = "零〇一二三四五六七八九幺两"
_ZH_FILLER = "我你他她它们都也还就则已经被又刚才现在一直其实目前仍然依然暂时默认原来依旧的话呢嘛啊呀给记一下新"
_ZH_TAIL = re.compile(
    r"""
    [ \t]*
    (?:
        ["""
    + _ZH_FILLER
    + r"""]{0,6}
        [ \t]*
        (?:就是|是|为|為|叫|叫做|设置成了?|设置为|设为了?|设成了?|改成了?|改为了?|换成了?|变成了?|更改为
          |修改为|修改成了?|重置为|重置成了?|设的是|用的是|写的是|输入|:|=)
        [ \t]*[:：]?
    )?
    (?:[ \t]*\d{1,2}[ \t]*位(?:数字|数)?[ \t]*[:：是为])?
    [ \t]*
    (?:
        ["'“‘「『《](?P<quoted>[^"'”’」』》\n]{2,40})["'”’」』》]
      | ["'“‘「『【\[(（]?[ \t]*
        (?:
            (?P<digits>\d(?:[ \-]?\d){3,})(?![0-9A-Za-z]|[ \t]*["""
    + _ZH_UNITS
    + r"""])
          | (?P<zhnum>["""
    + _ZH_NUMERALS
    + r"""](?:[ ,，、]?["""
    + _ZH_NUMERALS
    + r"""]){3,})
            (?!["""
    + _ZH_UNITS
    + r"""])
          | (?P<plain>[!#-&(-_a-~]+)
        )
    )
    """,
    re.IGNORECASE | re.VERBOSE,
)
_UNIT_AFTER = re.compile(r"[ \t]*[" + _ZH_UNITS + "]")
_ZH_QUESTION = frozenset(["什么", "多少", "啥", "哪个", "几位", "几个", "多长", "怎么", "忘了", "不对", "错了", "正确"])
# Words that say something about a passphrase rather than being one.
_ZH_NOT_VALUES = frozenset(
    [
        "错误",
        "过期",
        "无效",
        "失效",
        "一样",
        "相同",
        "不同",
        "必须",
        "需要",
        "意思",
        "区别",
        "修改",
        "重置",
        "忘记",
        "保密",
        "安全",
        "复杂",
        "简单",
    ]
)


def _zh_value_ok(value: re.Match[str], text: str) -> bool:
    if value.group("digits") is not None or value.group("zhnum") is not None:
        return True
    if value.group("quoted") is not None:
        quoted = value.group("quoted").strip()
        return len(quoted) >= 2 and quoted not in _ZH_QUESTION and not is_filler(quoted, quoted)
    raw = value.group("plain")
    core, punct_after = value_core(raw, quoted=False)
    if len(core) < 4 or is_filler(core, raw):
        return False
    end = value.end()
    if core.isdigit() and _UNIT_AFTER.match(text, end):
        return False  # "密码是2024年改的": a date, not a password
    if core.isalpha():
        # "密码是wifi的那个" is not a disclosure; "密码是hunter" at a clause end is.
        return punct_after or end == len(text) or at_clause_end(text, end)
    return True


# A passphrase said in Chinese words: "口令是芝麻开门", "暗号：天王盖地虎".
_ZH_PASSPHRASE = re.compile(
    r"(?:口令|暗号|暗號)[ \t]*(?:就是|是|为|為|叫|:|：)[ \t]*(?P<secret>[\u4e00-\u9fff]{3,10})(?=$|[，。！？,.!?\s])"
)


# A password described, then its digits: "我的密码就是我家门牌号加生日 19880312",
# "支付密码是我女儿的生日 20150607". The words between are a description (no
# clause break, no question), the number at least four digits and not a date
# with its units ("2024年") or a count.
_ZH_DESCRIBED = re.compile(
    r"(?:密码|密碼|口令|PIN码|pin码)[" + _ZH_FILLER + r"]{0,6}[ \t]*"
    r"(?:就是|是|为|為|用的是|设的是|设成了?|设为了?|改成了?)[ \t]*"
    r"(?P<words>[^\n\d，。！？；,.!?;:：]{1,16}?)[ \t]*[:：]?[ \t]*"
    r"(?P<secret>\d(?:[ \-]?\d){3,})(?![0-9A-Za-z]|[ \t]*[" + _ZH_UNITS + r"])",
    re.IGNORECASE,
)


def chinese_scanner(text: str) -> Iterator[tuple[int, int]]:
    """Keyword first: 密码是123456, 验证码：884213, 口令为“天王盖地虎”, 口令是芝麻开门,
    密码就是门牌号加生日 19880312."""
    for match in _ZH_PASSPHRASE.finditer(text):
        if not any(word in match.group("secret") for word in _ZH_QUESTION | _ZH_NOT_VALUES):
            yield match.span("secret")
    for match in _ZH_DESCRIBED.finditer(text):
        if not any(word in match.group("words") for word in _ZH_QUESTION | _ZH_NOT_VALUES):
            yield match.span("secret")
    for keyword in _ZH_KEYWORD.finditer(text):
        value = _ZH_TAIL.match(text, keyword.end())
        if value is None or not _zh_value_ok(value, text):
            continue
        group = next(g for g in ("quoted", "digits", "zhnum", "plain") if value.group(g) is not None)
        yield value_span(value, group)


_ZH_REVERSE = re.compile(
    r"(?<![!#-~])(?P<value>[!#-~]{4,40}?)[ \t]*[,，]?[ \t]*(?:就是|是|为|為|即)[ \t]*"
    r"(?:我|你|他|她|我们|咱|我家|家里|公司|俺|您)的?[^\n，。,.!?！？]{0,8}?"
    r"(?:密码|口令|验证码|动态码|校验码|PIN码|支付码)",
    re.IGNORECASE,
)


def chinese_reverse_scanner(text: str) -> Iterator[tuple[int, int]]:
    """Value first: "123456 是我的银行卡密码", "abc@2024就是我家wifi密码"."""
    for match in _ZH_REVERSE.finditer(text):
        core = match.group("value").rstrip(".,;:")
        if len(core) >= 4 and not is_filler(core, core) and (any(c.isdigit() for c in core) or len(core) >= 6):
            yield match.start("value"), match.start("value") + len(core)
